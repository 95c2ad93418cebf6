/**
 * The soak's longer kinds of work (bench/soak.ts), each a few exchanges as its client makes them, every part kept as
 * a record of its own (bench/soak-records.ts `Part`) for the check after the run:
 *
 * - an async job: `Prefer: respond-async` on a chat completion, then `GET /v1/jobs/{id}` until it ends;
 * - a Realtime session (`GET /v1/realtime`, WebSocket): up to three text responses, a record each
 *   (`<session id>:<response id>`, the id its usage row carries); or one cut off by its client mid-answer
 *   (`realtime-left`), which must be billed all the same;
 * - a Message Batch (`POST /v1/messages/batches`) and an OpenAI batch (`/v1/files` then `/v1/batches`), polled
 *   until they end: a record per line, each line's result seen once.
 *
 * The polls go to any api (one may be down); every exchange has a deadline.
 */
import WebSocket from 'ws';
import { sleep } from './procs.js';
import { bodyHash as hash, errorCodeOf, type Outcome, type Part } from './soak-records.js';

export interface SessionOptions {
  /** Every api's base URL: the first is where the work starts, polls go to any. */
  apis: string[];
  apiKey: string;
  timeoutMs: number;
}

const pick = <T>(items: T[]) => items[Math.floor(Math.random() * items.length)]!;

function part(started: number, outcome: Outcome, fields: Partial<Part> = {}): Part {
  return {
    latencyMs: performance.now() - started,
    outcome,
    status: null,
    requestId: null,
    errorCode: null,
    bodyHash: '',
    ...fields,
  };
}

/** One HTTP exchange with a deadline; null when no answer came (connection refused, dropped, timed out). */
async function exchange(
  url: string,
  init: RequestInit,
  timeoutMs: number,
): Promise<{ status: number; text: string; requestId: string | null } | null> {
  try {
    const response = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    return { status: response.status, text: await response.text(), requestId: response.headers.get('x-request-id') };
  } catch {
    return null;
  }
}

/** GETs `path` from any api until `done` says the body is final; null past the deadline. */
async function pollUntil<T>(
  options: SessionOptions,
  path: string,
  headers: Record<string, string>,
  done: (body: T) => boolean,
  deadline: number,
): Promise<T | null> {
  while (performance.now() < deadline) {
    const answer = await exchange(`${pick(options.apis)}${path}`, { headers }, 10_000);
    if (answer?.status === 200) {
      const body = JSON.parse(answer.text) as T;
      if (done(body)) return body;
    }
    await sleep(answer ? 250 : 500);
  }
  return null;
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** A chat completion asked for asynchronously and polled until it ends. */
export async function asyncChat(seq: number, options: SessionOptions): Promise<Part[]> {
  const started = performance.now();
  const deadline = started + options.timeoutMs;
  const made = await exchange(
    `${options.apis[0]}/v1/chat/completions`,
    {
      method: 'POST',
      headers: { ...bearer(options.apiKey), 'content-type': 'application/json', prefer: 'respond-async' },
      body: JSON.stringify({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: `Soak job ${seq}: say hello.` }],
        max_tokens: 64,
      }),
    },
    options.timeoutMs,
  );
  if (!made) return [part(started, 'failed', { errorCode: 'no_answer', detail: 'no answer to the job' })];
  const base = { status: made.status, requestId: made.requestId };
  if (made.status >= 400 && made.status < 500)
    return [part(started, 'refused', { ...base, errorCode: errorCodeOf(made.text), bodyHash: hash(made.text) })];
  if (made.status !== 202)
    return [
      part(started, 'failed', {
        ...base,
        errorCode: errorCodeOf(made.text),
        bodyHash: hash(made.text),
        detail: `HTTP ${made.status} to the job`,
      }),
    ];
  const id = (JSON.parse(made.text) as { id: string }).id;
  const ended = await pollUntil<{ status: string; result?: { choices?: unknown[] }; error?: { code?: string } }>(
    options,
    `/v1/jobs/${encodeURIComponent(id)}`,
    bearer(options.apiKey),
    (job) => job.status === 'completed' || job.status === 'failed',
    deadline,
  );
  if (!ended) return [part(started, 'failed', { ...base, errorCode: 'timeout', detail: 'job not ended in time' })];
  const text = JSON.stringify(ended.result ?? ended.error ?? null);
  if (ended.status === 'completed' && Array.isArray(ended.result?.choices))
    return [part(started, 'answered', { ...base, status: 200, bodyHash: hash(text) })];
  return [
    part(started, 'failed', {
      ...base,
      errorCode: ended.error?.code ?? 'job_failed',
      bodyHash: hash(text),
      detail: 'job failed',
    }),
  ];
}

type Event = Record<string, unknown> & { type: string };

/**
 * A Realtime session of up to three text responses; with `leave`, the client closes the socket after the first
 * delta of its first response (whose text asks the fake to hold it open), and that response is its one record.
 */
export async function realtimeSession(seq: number, options: SessionOptions, leave: boolean): Promise<Part[]> {
  const started = performance.now();
  const url = `${options.apis[0]!.replace(/^http/, 'ws')}/v1/realtime?model=gpt-realtime`;
  const socket = new WebSocket(url, {
    headers: bearer(options.apiKey),
    perMessageDeflate: false,
    handshakeTimeout: 10_000,
  });
  const inbox: Event[] = [];
  let wake: (() => void) | undefined;
  let closed: { code: number; reason: string } | undefined;
  let upgradeStatus: number | null = null;
  let upgradeBody = '';
  socket.on('message', (data) => {
    try {
      inbox.push(JSON.parse(String(data)) as Event);
    } catch {
      inbox.push({ type: 'unparsable' });
    }
    wake?.();
  });
  socket.on('unexpected-response', (_request, response) => {
    upgradeStatus = response.statusCode ?? null;
    response.on('data', (chunk: Buffer) => (upgradeBody += chunk.toString()));
    response.on('end', () => socket.terminate());
  });
  // The session's request id: its responses' usage rows are `<request id>:<response id>`.
  let requestIdOfSession: string | null = null;
  socket.on('upgrade', (response) => {
    const header = response.headers['x-request-id'];
    requestIdOfSession = typeof header === 'string' ? header : null;
  });
  socket.on('error', () => undefined);
  socket.on('close', (code, reason) => {
    closed ??= { code, reason: String(reason) };
    wake?.();
  });
  const deadline = started + options.timeoutMs;
  /** The next event of one of `types`, an `error`, or null once the socket closed or the deadline passed. */
  const next = async (...types: string[]): Promise<Event | null> => {
    for (;;) {
      const at = inbox.findIndex((event) => types.includes(event.type) || event.type === 'error');
      if (at >= 0) return inbox.splice(at, 1)[0]!;
      if (closed || performance.now() > deadline) return null;
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 250);
      });
    }
  };
  const parts: Part[] = [];
  try {
    const created = await next('session.created');
    if (!created || created.type !== 'session.created') {
      await sleep(50);
      if (upgradeStatus !== null && upgradeStatus >= 400 && upgradeStatus < 500)
        return [
          part(started, 'refused', {
            status: upgradeStatus,
            errorCode: errorCodeOf(upgradeBody),
            bodyHash: hash(upgradeBody),
          }),
        ];
      return [
        part(started, 'failed', {
          status: upgradeStatus,
          errorCode: created ? 'error_event' : 'no_session',
          detail: created
            ? `error before the session: ${JSON.stringify(created.error).slice(0, 80)}`
            : `no session.created (${upgradeStatus ?? closed?.code ?? 'timeout'})`,
        }),
      ];
    }
    if (!requestIdOfSession)
      return [
        part(started, 'failed', {
          status: 101,
          errorCode: 'no_request_id',
          detail: 'the upgrade named no x-request-id',
        }),
      ];
    const sessionId: string = requestIdOfSession;
    const responses = leave ? 1 : 1 + (seq % 3);
    for (let n = 0; n < responses; n += 1) {
      const asked = performance.now();
      socket.send(
        JSON.stringify({
          type: 'conversation.item.create',
          item: {
            type: 'message',
            role: 'user',
            content: [{ type: 'input_text', text: `${leave ? '[hold] ' : ''}Soak session ${seq}, turn ${n}.` }],
          },
        }),
      );
      socket.send(JSON.stringify({ type: 'response.create', response: { output_modalities: ['text'] } }));
      const begun = await next('response.created');
      if (!begun || begun.type === 'error') {
        parts.push(
          part(asked, 'failed', {
            errorCode: begun ? 'error_event' : 'closed',
            detail: begun
              ? `error event: ` +
                `${String((begun.error as { code?: unknown })?.code ?? (begun.error as { type?: unknown })?.type)}`
              : `socket closed ${closed?.code ?? 'timeout'}`,
          }),
        );
        break;
      }
      const responseId = String((begun.response as { id?: unknown }).id);
      const requestId = `${sessionId}:${responseId}`;
      if (leave) {
        const delta = await next('response.output_text.delta', 'response.output_audio_transcript.delta');
        if (!delta || delta.type === 'error') {
          parts.push(
            part(asked, 'failed', {
              requestId,
              errorCode: delta ? 'error_event' : 'closed',
              detail: 'no delta before the end',
            }),
          );
          break;
        }
        socket.terminate();
        parts.push(part(asked, 'left', { requestId, status: 101 }));
        break;
      }
      const done = await next('response.done');
      if (!done || done.type === 'error') {
        parts.push(
          part(asked, 'failed', {
            requestId,
            errorCode: done ? 'error_event' : 'closed',
            detail: done
              ? `error event: ` +
                `${String((done.error as { code?: unknown })?.code ?? (done.error as { type?: unknown })?.type)}`
              : `socket closed ${closed?.code ?? 'timeout'}`,
          }),
        );
        break;
      }
      const response = done.response as { status?: string; output?: unknown };
      const outcome: Outcome = response.status === 'completed' ? 'answered' : 'failed';
      parts.push(
        part(asked, outcome, {
          requestId,
          status: 101,
          bodyHash: hash(JSON.stringify(response.output ?? null)),
          ...(outcome === 'failed'
            ? { errorCode: response.status ?? 'unknown', detail: `response ${response.status}` }
            : {}),
        }),
      );
      if (outcome === 'failed') break;
    }
    return parts;
  } finally {
    if (socket.readyState === WebSocket.OPEN) socket.close(1000);
    else if (socket.readyState !== WebSocket.CLOSED) socket.terminate();
  }
}

/** The lines of a batch of `count`: plain chat, to OpenAI and Anthropic alike. */
const lineModels = ['gpt-4o-mini', 'claude-sonnet-4-5'];

/** A Message Batch of a few requests, polled until it ends; a record per line, its result seen once. */
export async function messageBatch(seq: number, options: SessionOptions): Promise<Part[]> {
  const started = performance.now();
  const headers = { 'x-api-key': options.apiKey, 'anthropic-version': '2023-06-01' };
  const count = 2 + (seq % 3);
  const requests = Array.from({ length: count }, (_, i) => ({
    custom_id: `line-${i}`,
    params: {
      model: lineModels[i % lineModels.length],
      max_tokens: 32,
      messages: [{ role: 'user', content: `Soak batch ${seq}, line ${i}.` }],
    },
  }));
  const made = await exchange(
    `${options.apis[0]}/v1/messages/batches`,
    { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify({ requests }) },
    30_000,
  );
  if (!made) return [part(started, 'failed', { errorCode: 'no_answer', detail: 'no answer to the batch' })];
  if (made.status >= 400 && made.status < 500)
    return [
      part(started, 'refused', { status: made.status, requestId: made.requestId, errorCode: errorCodeOf(made.text) }),
    ];
  if (made.status !== 200)
    return [
      part(started, 'failed', {
        status: made.status,
        requestId: made.requestId,
        detail: `HTTP ${made.status} to the batch`,
      }),
    ];
  const id = (JSON.parse(made.text) as { id: string }).id;
  const ended = await pollUntil<{ processing_status: string; request_counts: Record<string, number> }>(
    options,
    `/v1/messages/batches/${id}`,
    headers,
    (b) => b.processing_status === 'ended',
    started + options.timeoutMs,
  );
  if (!ended) return [part(started, 'failed', { status: 200, detail: `batch ${id} not ended in time` })];
  let results: { status: number; text: string } | null = null;
  // Read as a client would: again on another api after a second when one is down (killed a moment ago).
  for (let tries = 0; tries < 5 && results?.status !== 200; tries += 1) {
    if (tries > 0) await sleep(1000);
    results = await exchange(`${pick(options.apis)}/v1/messages/batches/${id}/results`, { headers }, 30_000);
  }
  if (results?.status !== 200)
    return [part(started, 'failed', { status: results?.status ?? null, detail: `batch ${id}: no results` })];
  return batchLines(started, id, count, results.text, (line) => {
    const parsed = line as {
      custom_id: string;
      result: { type: string; message?: unknown; error?: { error?: { type?: string } } };
    };
    const message = parsed.result.message as { id?: string } | undefined;
    return {
      customId: parsed.custom_id,
      ok: parsed.result.type === 'succeeded',
      requestId: null,
      answerId: message?.id,
      errorCode: parsed.result.error?.error?.type ?? parsed.result.type,
      body: message ?? null,
    };
  });
}

/** An OpenAI batch: its input file uploaded, the batch made, polled until it ends, its output and error files read. */
export async function openaiBatch(seq: number, options: SessionOptions): Promise<Part[]> {
  const started = performance.now();
  const count = 2 + (seq % 3);
  const jsonl = Array.from({ length: count }, (_, i) =>
    JSON.stringify({
      custom_id: `line-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: {
        model: lineModels[i % lineModels.length],
        max_tokens: 32,
        messages: [{ role: 'user', content: `Soak batch ${seq}, line ${i}.` }],
      },
    }),
  ).join('\n');
  const form = new FormData();
  form.set('purpose', 'batch');
  form.set('file', new Blob([`${jsonl}\n`], { type: 'application/jsonl' }), `soak-${seq}.jsonl`);
  const uploaded = await exchange(
    `${options.apis[0]}/v1/files`,
    { method: 'POST', headers: bearer(options.apiKey), body: form },
    30_000,
  );
  if (!uploaded) return [part(started, 'failed', { errorCode: 'no_answer', detail: 'no answer to the file upload' })];
  if (uploaded.status !== 200)
    return [
      part(started, uploaded.status < 500 ? 'refused' : 'failed', {
        status: uploaded.status,
        requestId: uploaded.requestId,
        errorCode: errorCodeOf(uploaded.text),
        detail: `HTTP ${uploaded.status} to the upload`,
      }),
    ];
  const fileId = (JSON.parse(uploaded.text) as { id: string }).id;
  const made = await exchange(
    `${options.apis[0]}/v1/batches`,
    {
      method: 'POST',
      headers: { ...bearer(options.apiKey), 'content-type': 'application/json' },
      body: JSON.stringify({ input_file_id: fileId, endpoint: '/v1/chat/completions', completion_window: '24h' }),
    },
    30_000,
  );
  if (!made) return [part(started, 'failed', { errorCode: 'no_answer', detail: 'no answer to the batch' })];
  if (made.status >= 400 && made.status < 500)
    return [
      part(started, 'refused', { status: made.status, requestId: made.requestId, errorCode: errorCodeOf(made.text) }),
    ];
  if (made.status !== 200)
    return [
      part(started, 'failed', {
        status: made.status,
        requestId: made.requestId,
        detail: `HTTP ${made.status} to the batch`,
      }),
    ];
  const id = (JSON.parse(made.text) as { id: string }).id;
  const ended = await pollUntil<{ status: string; output_file_id: string | null; error_file_id: string | null }>(
    options,
    `/v1/batches/${id}`,
    bearer(options.apiKey),
    (b) => ['completed', 'failed', 'expired', 'cancelled'].includes(b.status),
    started + options.timeoutMs,
  );
  if (!ended) return [part(started, 'failed', { status: 200, detail: `batch ${id} not ended in time` })];
  if (ended.status !== 'completed')
    return [part(started, 'failed', { status: 200, detail: `batch ${id} ${ended.status}` })];
  let text = '';
  for (const file of [ended.output_file_id, ended.error_file_id]) {
    if (!file) continue;
    let content: { status: number; text: string } | null = null;
    for (let tries = 0; tries < 5 && content?.status !== 200; tries += 1) {
      if (tries > 0) await sleep(1000);
      content = await exchange(
        `${pick(options.apis)}/v1/files/${file}/content`,
        { headers: bearer(options.apiKey) },
        30_000,
      );
    }
    if (content?.status !== 200)
      return [part(started, 'failed', { status: content?.status ?? null, detail: `batch ${id}: file ${file} unread` })];
    text += `${content.text}\n`;
  }
  return batchLines(started, id, count, text, (line) => {
    const parsed = line as {
      custom_id: string;
      response: { status_code: number; request_id: string; body: { error?: { code?: string; type?: string } } } | null;
      error: { code?: string } | null;
    };
    const ok = parsed.response?.status_code === 200;
    return {
      customId: parsed.custom_id,
      ok,
      requestId: parsed.response?.request_id ?? null,
      errorCode: parsed.error?.code ?? parsed.response?.body.error?.code ?? parsed.response?.body.error?.type ?? null,
      body: parsed.response?.body ?? null,
    };
  });
}

/**
 * A record per line of a batch's results, each custom id once; a line missing or seen twice is a failure of its own.
 */
function batchLines(
  started: number,
  batchId: string,
  count: number,
  text: string,
  read: (line: unknown) => {
    customId: string;
    ok: boolean;
    requestId: string | null;
    answerId?: string | undefined;
    errorCode: string | null;
    body: unknown;
  },
): Part[] {
  const seen = new Map<string, number>();
  const parts: Part[] = [];
  for (const raw of text.split('\n')) {
    if (!raw.trim()) continue;
    const line = read(JSON.parse(raw));
    seen.set(line.customId, (seen.get(line.customId) ?? 0) + 1);
    if (seen.get(line.customId)! > 1) continue;
    const fields = {
      status: 200,
      requestId: line.requestId,
      bodyHash: hash(JSON.stringify(line.body)),
      batch: `${batchId}/${line.customId}`,
      ...(line.answerId ? { answerId: line.answerId } : {}),
    };
    parts.push(
      line.ok
        ? part(started, 'answered', fields)
        : part(started, 'failed', { ...fields, errorCode: line.errorCode ?? 'errored', detail: 'line errored' }),
    );
  }
  for (let i = 0; i < count; i += 1) {
    const n = seen.get(`line-${i}`) ?? 0;
    if (n !== 1)
      parts.push(
        part(started, 'failed', {
          status: 200,
          batch: `${batchId}/line-${i}`,
          detail: n === 0 ? 'batch line missing' : 'answered twice',
        }),
      );
  }
  return parts;
}
