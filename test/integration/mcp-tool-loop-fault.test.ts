import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { Redis } from 'ioredis';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { startFakeMcp, type FakeMcp } from '../support/fake-mcp.js';
import { usageRows } from '../support/record.js';
import { openaiToolCall } from '../support/agents.js';
import { adminClient } from '../support/admin-client.js';

const adminToken = 'tool-loop-fault-admin';

/**
 * A chat worker killed while its tool loop waits on a call: the job's next run (on another worker, once its lock
 * expired) does not run the loop again, since the tool may have done its work: the client is told `worker_lost`, the
 * call finishes on its own worker and is billed once, and the server saw it once.
 */
describe('the tool loop when its worker dies', () => {
  let api: GatewayProcess;
  let chatWorker: GatewayProcess;
  let mcpWorker: GatewayProcess;
  let spare: GatewayProcess | undefined;
  let openai: FakeOpenAI;
  let notes: FakeMcp;
  let redis: Redis;
  let redisUrl: string;
  let dir: string;
  let env: Record<string, string>;
  const { admin } = adminClient(() => api.url, adminToken);

  before(async () => {
    notes = await startFakeMcp();
    openai = await startFakeOpenAI();
    openai.setDefault((request) => {
      const body = request.body as Record<string, any>;
      const last = body.messages.at(-1);
      if (
        last?.role !== 'user' ||
        !body.tools?.some((tool: Record<string, any>) => tool.function?.name === 'notes__slow')
      )
        return undefined;
      return openaiToolCall(
        body,
        { id: 'call_slow', name: 'notes__slow', arguments: JSON.stringify({ ms: 4000 }) },
        { prompt_tokens: 300, completion_tokens: 5 },
      );
    });
    dir = await mkdtemp(join(tmpdir(), 'sy-loop-fault-'));
    const file = join(dir, 'mcp.json');
    await writeFile(
      file,
      JSON.stringify({ servers: { notes: { url: notes.url, timeout_ms: 10_000, price_per_call_usd: '0.01' } } }),
    );
    ({ redis, url: redisUrl } = await freshRedis(11));
    env = {
      REDIS_URL: redisUrl,
      ADMIN_TOKEN: adminToken,
      OPENAI_API_KEY: 'sk-openai-test',
      OPENAI_BASE_URL: openai.url,
      MCP_SERVERS_FILE: file,
      MCP_CHECK_INTERVAL_MS: '1000',
      WORKER_LOCK_MS: '2000',
    };
    [api, chatWorker, mcpWorker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env: { ...env, WORKER_QUEUES: 'chat' } }),
      startGateway({ role: 'worker', env: { ...env, WORKER_QUEUES: 'mcp' } }),
    ]);
    await waitFor(
      async () =>
        ((await admin('GET', '/admin/mcp/servers')).json.data as Array<{ status: string }>)[0]?.status === 'ok',
      30_000,
      'the server checked',
    );
  });

  after(async () => {
    await Promise.allSettled([api, chatWorker, mcpWorker, spare].map((proc) => proc?.stop()));
    await Promise.allSettled([notes?.close(), openai?.close()]);
    redis?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a run after its worker died mid-call is not run again: worker_lost, the call made and billed once', async () => {
    const account = await admin('POST', '/admin/accounts', { email: 'fault@example.com' });
    await admin('POST', `/admin/accounts/${account.json.id}/credits`, { amount_usd: 5 });
    const key = await admin('POST', '/admin/keys', { name: 'fault', account_id: account.json.id });
    const keyId = String(key.json.id);
    const client = new OpenAI({
      apiKey: String(key.json.key),
      baseURL: `${api.url}/v1`,
      maxRetries: 0,
      timeout: 60_000,
    });
    const started = notes.slow.started;
    const pending = client.responses.create({
      model: 'gpt-4o-mini',
      input: 'Sleep on it.',
      tools: [{ type: 'mcp', server_label: 'notes', require_approval: 'never' }],
    });
    // Its refusal may come before the spare worker is up (the lost job is found by whichever worker looks first):
    // caught at once, and read after.
    const answered = pending.then(
      () => undefined,
      (error: unknown) => error,
    );
    await waitFor(() => notes.slow.started > started, 10_000, 'the call at the server');
    await chatWorker.stop('SIGKILL');
    spare = await startGateway({ role: 'worker', env: { ...env, WORKER_QUEUES: 'chat' } });
    const error = await answered;
    assert.ok(error instanceof OpenAI.APIError, String(error));
    assert.equal((error.error as { code?: string } | undefined)?.code, 'worker_lost', JSON.stringify(error.error));
    assert.equal(notes.slow.started, started + 1, 'the server was asked once');
    let calls: Awaited<ReturnType<typeof usageRows>> = [];
    await waitFor(
      async () => {
        calls = (await usageRows(redisUrl)).filter(
          (row) => row.key_id === keyId && row.endpoint === 'mcp.tools/call' && row.settled,
        );
        return calls.length > 0;
      },
      15_000,
      'the call settled',
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    calls = (await usageRows(redisUrl)).filter((row) => row.key_id === keyId && row.endpoint === 'mcp.tools/call');
    assert.deepEqual(
      calls.map((row) => [row.status, Number(row.cost_micros)]),
      [['completed', 10_000]],
    );
  });
});
