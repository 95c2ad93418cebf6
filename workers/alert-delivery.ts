import type { Redis } from 'ioredis';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { alertBody, signAlert, signatureHeader } from '../shared/alerts.js';
import type { AlertsConfig } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { alertsQueueName, type AlertJobData } from '../shared/queues.js';
import type { RecordDb } from '../storage/record/database.js';
import { readAlert, recordDeliveryAttempt, type DeliveryAttempt } from '../storage/record/alerts.js';

/**
 * Delivers budget alerts to the webhook (`ALERT_WEBHOOK_URL`): one job of the `{alerts}` queue per alert (queued by
 * the record's alert writer), one POST per attempt, signed (`Switchyard-Signature`, shared/alerts.ts), each attempt
 * bounded by `ALERT_WEBHOOK_TIMEOUT_MS` from connecting to the answer's last byte. What is decided here: a 2xx
 * delivers; a 5xx, 408, 429, a network error or a timeout is tried again by BullMQ after a wait that doubles
 * (`ALERT_WEBHOOK_ATTEMPTS` in all), the last of them leaving the alert `failed`; any other answer (a 4xx, a redirect)
 * is final at once: the receiver said no, and asking again says the same. Every attempt is written to the alert's
 * row before the job moves on, so the row tells what happened even when the process dies after it.
 */

export interface AlertDeliveryDeps {
  redis: Redis;
  record: RecordDb;
  log: Logger;
  config: AlertsConfig;
}

/** Whether an HTTP answer of the webhook is worth trying again. */
export function retryableStatus(status: number): boolean {
  return status >= 500 || status === 408 || status === 429;
}

/** One POST of an alert: the webhook's status, or null with why there was none. */
async function post(
  url: string,
  secret: string,
  body: string,
  timeoutMs: number,
): Promise<{ status: number | null; error: string | null }> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': 'Switchyard-Alerts',
        [signatureHeader]: signAlert(secret, body, Math.floor(Date.now() / 1000)),
      },
      body,
      redirect: 'manual',
      signal,
    });
    // Read to its end (under the same deadline), so a receiver that answers and then hangs counts as timed out.
    await response.arrayBuffer();
    return { status: response.status, error: response.ok ? null : `the webhook answered ${response.status}` };
  } catch (error) {
    if (signal.aborted) return { status: null, error: `no answer within ${timeoutMs} ms` };
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return { status: null, error: `network error: ${cause?.code ?? cause?.message ?? (error as Error).message}` };
  }
}

/** The processor: one attempt at one alert. */
export function deliverAlert(deps: AlertDeliveryDeps) {
  return async (job: Job<AlertJobData>): Promise<void> => {
    const { record, config, log } = deps;
    const alert = await readAlert(record, job.data.alertId);
    // Gone (the record restored from before it) or settled already (a job queued again after its delivery): nothing to
    // do.
    if (!alert || alert.state !== 'pending') return;
    if (!config.webhookUrl || !config.webhookSecret) {
      await recordDeliveryAttempt(record, alert.id, { state: 'no_webhook', status: null, error: null });
      return;
    }
    const body = JSON.stringify(
      alertBody(
        {
          id: alert.id,
          teamId: alert.team_id,
          kind: alert.kind,
          scopeId: alert.scope_id,
          period: alert.period,
          periodStart: alert.period_start,
          periodEnd: alert.period_end,
          thresholdPercent: alert.threshold_percent,
          limitMicros: alert.limit_micros,
          spentMicros: alert.spent_micros,
          createdMs: alert.created,
        },
        alert.team_name,
        alert.scope_name,
      ),
    );
    const { status, error } = await post(config.webhookUrl, config.webhookSecret, body, config.timeoutMs);
    const attempt = job.attemptsMade + 1;
    const lastAttempt = attempt >= (job.opts.attempts ?? 1);
    const delivered = status !== null && status >= 200 && status < 300;
    const retryable = !delivered && (status === null || retryableStatus(status));
    const outcome: DeliveryAttempt = delivered
      ? { state: 'delivered', status, error: null, deliveredAt: Date.now() }
      : { state: retryable && !lastAttempt ? 'pending' : 'failed', status, error };
    await recordDeliveryAttempt(record, alert.id, outcome);
    if (delivered) return;
    log.warn(
      { alert: alert.id, attempt, status, error, final: outcome.state === 'failed' },
      'a budget alert was not delivered',
    );
    if (!retryable) throw new UnrecoverableError(error ?? 'the webhook refused the alert');
    throw new Error(error ?? 'the webhook did not take the alert');
  };
}

/** The `{alerts}` queue's worker in this process: a few deliveries at once (they wait on the network, not the CPU). */
export function startAlertDelivery(deps: AlertDeliveryDeps): Worker<AlertJobData> {
  const worker = new Worker<AlertJobData>(alertsQueueName, deliverAlert(deps), {
    connection: deps.redis,
    concurrency: 8,
  });
  worker.on('error', (error) =>
    deps.log.warn({ err: error }, 'the alert delivery worker lost its connection; it reconnects'),
  );
  return worker;
}
