import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { ConsoleClient } from '../support/console-client.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { createFakeOpenAIImages, FAKE_IMAGE_B64 } from '../support/fake-openai-images.js';
import { createFakePng } from '../support/fake-bfl.js';

const adminToken = 'queue-dashboard-admin-token';
const adminEmail = 'root@dashboard.test';
const adminPassword = 'root-password-1';
const vendorKey = 'sk-vendor-secret-5f1c0a9e7d3b42c8a6e1';
/** A secret a client pastes into a prompt, and one a vendor quotes back in an error. */
const pastedSecret = 'sk-proj-pasted0secret1in2a3prompt4';
const signedLink = 'https://files.vendor.test/out.png?X-Amz-Signature=9f2c1e7a55&X-Amz-Date=20250101';

type Json = Record<string, unknown>;
interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: Json & { error?: { message: string; type: string; param: string | null; code: string | null } };
}
interface BoardQueue {
  name: string;
  displayName?: string;
  readOnlyMode: boolean;
  statuses: string[];
  isPaused: boolean;
  jobs: Array<{
    id: string;
    name: string;
    data: unknown;
    returnValue: unknown;
    failedReason?: string;
    stacktrace: string[];
  }>;
}

async function call(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: unknown,
): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method,
    redirect: 'manual',
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json: Answer['json'];
  try {
    json = JSON.parse(text) as Answer['json'];
  } catch {
    json = {};
  }
  return { status: res.status, headers: res.headers, text, json };
}

function expectError(answer: Answer, status: number, code: string): void {
  assert.equal(answer.status, status, answer.text);
  assert.equal(answer.json.error?.code, code, answer.text);
  assert.equal(typeof answer.json.error?.message, 'string');
  assert.ok('type' in answer.json.error! && 'param' in answer.json.error!, answer.text);
}

// bull-board at /admin/queues against real gateway processes: who may enter, what it shows of a job, what it may
// change.
describe('queue dashboard', () => {
  let redis: Redis;
  let fake: FakeOpenAI;
  let blobDir: string;
  /** api and workers, read-only dashboard, ADMIN_TOKEN set. */
  let gateway: GatewayProcess;
  /** A second api on the same Redis: QUEUE_DASHBOARD_WRITE=on, no ADMIN_TOKEN. */
  let writer: GatewayProcess;
  let clientKey: string;
  let admin: ConsoleClient;
  const bearer = { authorization: `Bearer ${adminToken}` };
  const ids = { chat: '', edit: '', failed: '' };
  let chatQueue = '';
  let imageQueue = '';

  const cookieOf = (console: ConsoleClient) => ({ cookie: `sy_session=${console.cookies.get('sy_session')}` });
  const board = (base: string, name: string, headers: Record<string, string>) =>
    call(
      base,
      'GET',
      `/admin/queues/api/queues?activeQueue=${encodeURIComponent(name)}&status=latest&page=1&jobsPerPage=50`,
      headers,
    );
  const jobPath = (queue: string, id: string, action = '') =>
    `/admin/queues/api/queues/${encodeURIComponent(queue)}/${encodeURIComponent(id)}${action}`;

  before(async () => {
    fake = await startFakeOpenAI({ apiKey: vendorKey });
    fake.setDefault(createFakeOpenAIImages({ apiKey: vendorKey }));
    const fresh = await freshRedis(5);
    redis = fresh.redis;
    blobDir = mkdtempSync(join(tmpdir(), 'switchyard-dashboard-'));
    const env = { REDIS_URL: fresh.url, OPENAI_API_KEY: vendorKey, OPENAI_BASE_URL: fake.url, BLOB_DIR: blobDir };
    // One after the other: the first makes the admin account.
    gateway = await startGateway({
      env: { ...env, ADMIN_TOKEN: adminToken, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword },
    });
    writer = await startGateway({ role: 'api', env: { ...env, QUEUE_DASHBOARD_WRITE: 'on' } });
    clientKey = (await createKey(redis)).key;
    const client = gateway.client(clientKey);

    // A chat request carrying the client's own key, a pasted vendor-looking key and an inline image.
    const png = createFakePng([200, 30, 30], 8);
    const chat = await client.chat.completions
      .create({
        model: 'gpt-4o-mini',
        messages: [
          {
            role: 'user',
            content: [
              {
                type: 'text',
                text: `My key is ${clientKey}; send Authorization: Bearer ${pastedSecret} and password=hunter2hunter2`,
              },
              { type: 'image_url', image_url: { url: `data:image/png;base64,${png.toString('base64')}` } },
            ],
          },
        ],
      })
      .withResponse();
    ids.chat = chat.response.headers.get('x-request-id')!;

    // An image edit: the upload travels by reference, the answer carries base64 image bytes.
    const edit = await client.images
      .edit({
        model: 'gpt-image-1',
        image: await toFile(png, 'photo.png', { type: 'image/png' }),
        prompt: 'make it blue',
      })
      .withResponse();
    ids.edit = edit.response.headers.get('x-request-id')!;
    assert.ok(edit.data.data![0]!.b64_json);

    // A vendor error quoting the vendor key and a signed link: the job fails (a 400 is not retried).
    fake.enqueue({
      status: 400,
      json: {
        error: {
          message: `Invalid request from key ${vendorKey}: see ${signedLink}`,
          type: 'invalid_request_error',
          param: null,
          code: null,
        },
      },
    });
    await assert.rejects(
      client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'fail please' }] }),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.BadRequestError, String(error));
        ids.failed = error.requestID!;
        return true;
      },
    );
    assert.ok(ids.chat && ids.edit && ids.failed);

    admin = new ConsoleClient(gateway.url);
    assert.equal((await admin.signIn(adminEmail, adminPassword)).status, 200);
    // The board names a queue as BullMQ does (`chat`, or a hash-tagged `{chat}` on a Cluster), its display name the
    // capability.
    const queues = (await call(gateway.url, 'GET', '/admin/queues/api/queues', bearer)).json.queues as BoardQueue[];
    const named = (capability: string) =>
      queues.find((queue) => (queue.displayName ?? queue.name) === capability)!.name;
    chatQueue = named('chat');
    imageQueue = named('image');
  });

  after(async () => {
    await Promise.all([gateway?.stop(), writer?.stop()]);
    await fake?.close();
    redis?.disconnect();
    if (blobDir) rmSync(blobDir, { recursive: true, force: true });
  });

  describe('entry', () => {
    it('serves the page, its static files and its JSON API for the admin token, naming every queue', async () => {
      const page = await call(gateway.url, 'GET', '/admin/queues', { ...bearer, accept: 'text/html' });
      assert.equal(page.status, 200, page.text);
      assert.match(page.headers.get('content-type')!, /text\/html/);
      assert.match(page.text, /<base href="\/admin\/queues\/"/);
      assert.match(page.headers.get('content-security-policy')!, /frame-ancestors 'none'/);
      assert.equal(page.headers.get('cache-control'), 'no-store');

      const icon = await fetch(`${gateway.url}/admin/queues/static/favicon-32x32.png`, { headers: bearer });
      assert.equal(icon.status, 200);
      assert.match(icon.headers.get('content-type')!, /image\/png/);

      const list = await call(gateway.url, 'GET', '/admin/queues/api/queues', bearer);
      assert.equal(list.status, 200, list.text);
      const queues = list.json.queues as BoardQueue[];
      const names = queues.map((queue) => queue.displayName ?? queue.name).sort();
      assert.deepEqual(names, ['audio', 'chat', 'embeddings', 'image', 'realtime', 'video']);
      assert.ok(
        queues.every((queue) => queue.readOnlyMode),
        'read-only by default',
      );
      // BullMQ 6 has no paused job state: the board offers no such tab, and says whether the queue is paused instead.
      for (const queue of queues) {
        assert.ok(queue.statuses.includes('waiting') && !queue.statuses.includes('paused'), queue.statuses.join(', '));
        assert.equal(queue.isPaused, false);
      }
    });

    it('answers 401 in the OpenAI shape without credentials, on every path, and with a wrong token', async () => {
      for (const path of [
        '/admin/queues',
        '/admin/queues/',
        '/admin/queues/api/queues',
        '/admin/queues/api/redis/stats',
        '/admin/queues/static/favicon-32x32.png',
        '/admin/queues/nothing-here',
      ]) {
        const answer = await call(gateway.url, 'GET', path);
        expectError(answer, 401, 'not_signed_in');
        assert.match(answer.headers.get('www-authenticate')!, /^Bearer/);
      }
      expectError(
        await call(gateway.url, 'GET', '/admin/queues/api/queues', { authorization: 'Bearer not-the-token' }),
        401,
        'invalid_admin_token',
      );
      expectError(await call(gateway.url, 'PUT', jobPath(chatQueue, ids.failed, '/retry')), 401, 'not_signed_in');
      // A browser gets a page that leads through the console.
      const browser = await call(gateway.url, 'GET', '/admin/queues', {
        accept: 'text/html,application/xhtml+xml,*/*;q=0.8',
      });
      assert.equal(browser.status, 401);
      assert.match(browser.text, /href="\/console\/queue-dashboard"/);
    });

    it('lets an admin console session in through /console/queue-dashboard, which scopes a cookie to /admin/queues', async () => {
      const entry = await call(gateway.url, 'GET', '/console/queue-dashboard', cookieOf(admin));
      assert.equal(entry.status, 302, entry.text);
      assert.equal(entry.headers.get('location'), '/admin/queues');
      const cookie = entry.headers.getSetCookie().find((line) => line.startsWith('sy_session='))!;
      assert.ok(cookie, entry.headers.getSetCookie().join('\n'));
      assert.match(cookie, /path=\/admin\/queues/i);
      assert.match(cookie, /httponly/i);
      assert.match(cookie, /samesite=strict/i);
      assert.equal(cookie.split(';')[0], `sy_session=${admin.cookies.get('sy_session')}`);

      const page = await call(gateway.url, 'GET', '/admin/queues', { ...cookieOf(admin), accept: 'text/html' });
      assert.equal(page.status, 200, page.text);
      assert.equal((await call(gateway.url, 'GET', '/admin/queues/api/queues', cookieOf(admin))).status, 200);
      // Signed out, without a session: the entry leads to the console's Queues page (sign-in first).
      const signedOut = await call(gateway.url, 'GET', '/console/queue-dashboard');
      assert.equal(signedOut.status, 302);
      assert.equal(signedOut.headers.get('location'), '/console/admin/queues');
    });

    it('answers 403 to a member’s session, and 401 once a session is signed out', async () => {
      const made = await call(gateway.url, 'POST', '/admin/accounts', bearer, {
        email: 'member@dashboard.test',
        password: 'member-password',
        role: 'member',
      });
      assert.equal(made.status, 201, made.text);
      const member = new ConsoleClient(gateway.url);
      assert.equal((await member.signIn('member@dashboard.test', 'member-password')).status, 200);
      expectError(await call(gateway.url, 'GET', '/admin/queues/api/queues', cookieOf(member)), 403, 'admin_only');
      expectError(
        await call(gateway.url, 'GET', '/admin/queues/static/favicon-32x32.png', cookieOf(member)),
        403,
        'admin_only',
      );
      assert.equal((await call(gateway.url, 'GET', '/console/queue-dashboard', cookieOf(member))).status, 403);

      const leaving = new ConsoleClient(gateway.url);
      await leaving.signIn(adminEmail, adminPassword);
      const stolen = cookieOf(leaving);
      assert.equal((await call(gateway.url, 'GET', '/admin/queues/api/queues', stolen)).status, 200);
      assert.equal((await leaving.request('DELETE', '/console/api/session')).status, 200);
      expectError(await call(gateway.url, 'GET', '/admin/queues/api/queues', stolen), 401, 'not_signed_in');
    });

    it('with ADMIN_TOKEN unset answers 401 to any bearer, and lets an admin session in', async () => {
      expectError(await call(writer.url, 'GET', '/admin/queues/api/queues', bearer), 401, 'invalid_admin_token');
      expectError(await call(writer.url, 'GET', '/admin/queues/api/queues'), 401, 'not_signed_in');
      assert.equal((await call(writer.url, 'GET', '/admin/queues/api/queues', cookieOf(admin))).status, 200);
    });

    it('leaves the rest of the app as it was', async () => {
      assert.equal((await call(gateway.url, 'GET', '/admin/keys', bearer)).status, 200);
      expectError(await call(gateway.url, 'GET', '/admin/queuesx', bearer), 404, 'unknown_url');
      assert.equal((await call(gateway.url, 'GET', '/healthz')).status, 200);
      const config = await call(gateway.url, 'GET', '/console/api/config');
      assert.equal(config.json.queue_dashboard, '/console/queue-dashboard');
    });
  });

  describe('what a job shows', () => {
    /** Every answer the dashboard gives about our jobs, as one text. */
    async function everything(): Promise<{ text: string; chat: BoardQueue; image: BoardQueue }> {
      const chat = await board(gateway.url, chatQueue, bearer);
      const image = await board(gateway.url, imageQueue, bearer);
      assert.equal(chat.status, 200, chat.text);
      assert.equal(image.status, 200, image.text);
      const details = await Promise.all([
        call(gateway.url, 'GET', jobPath(chatQueue, ids.chat), bearer),
        call(gateway.url, 'GET', jobPath(chatQueue, ids.failed), bearer),
        call(gateway.url, 'GET', jobPath(imageQueue, ids.edit), bearer),
        call(gateway.url, 'GET', jobPath(chatQueue, ids.failed, '/logs'), bearer),
        call(gateway.url, 'GET', `${jobPath(chatQueue, ids.failed, '/flow')}?root=node`, bearer),
      ]);
      for (const detail of details) assert.equal(detail.status, 200, detail.text);
      const pick = (answer: Answer) =>
        (answer.json.queues as BoardQueue[]).find(
          (queue) => queue.name === (answer === chat ? chatQueue : imageQueue),
        )!;
      return {
        text: [chat, image, ...details].map((answer) => answer.text).join('\n'),
        chat: pick(chat),
        image: pick(image),
      };
    }

    it('lists the jobs with no client key, vendor key, pasted secret, signature or inline image bytes anywhere', async () => {
      const { text, chat, image } = await everything();
      const chatIds = chat.jobs.map((job) => job.id);
      assert.ok(chatIds.includes(ids.chat) && chatIds.includes(ids.failed), chatIds.join(', '));
      assert.ok(image.jobs.some((job) => job.id === ids.edit));

      for (const secret of [
        clientKey,
        clientKey.slice(3, 30),
        vendorKey,
        pastedSecret,
        'hunter2hunter2',
        '9f2c1e7a55',
        FAKE_IMAGE_B64.slice(0, 40),
      ]) {
        assert.ok(!text.includes(secret), `the dashboard shows ${secret}`);
      }
      assert.doesNotMatch(text, /data:image\/png;base64/);
      assert.doesNotMatch(text, /iVBORw0KGgo/, 'no PNG bytes in base64');
    });

    it('shows what is left: ids, the endpoint and model, redaction marks, upload references and the error', async () => {
      const { chat, image } = await everything();
      const asked = chat.jobs.find((job) => job.id === ids.chat)!;
      assert.equal(asked.name, 'chat.completions · gpt-4o-mini');
      const data = asked.data as {
        requestId: string;
        keyId: string;
        payload: { messages: Array<{ content: Array<{ text?: string; image_url?: { url: string } }> }> };
      };
      assert.equal(data.requestId, ids.chat);
      assert.match(data.keyId, /^key_/);
      const [text, picture] = data.payload.messages[0]!.content;
      assert.match(
        text!.text!,
        /My key is \[redacted\]; send Authorization: Bearer \[redacted\] and password=\[redacted\]/,
      );
      assert.match(picture!.image_url!.url, /^\[upload: image\/png, \d+ bytes\]$/);
      assert.match(JSON.stringify(asked.returnValue), /Hello from fake upstream/);

      const edited = image.jobs.find((job) => job.id === ids.edit)!;
      const editData = edited.data as {
        payload: { images: Array<{ key: string; contentType: string; size: number }> };
      };
      assert.match(editData.payload.images[0]!.key, /^uploads\//);
      assert.equal(editData.payload.images[0]!.contentType, 'image/png');
      assert.match(JSON.stringify(edited.returnValue), /"b64_json":"\[base64: \d+ bytes\]"/);

      const failed = chat.jobs.find((job) => job.id === ids.failed)!;
      assert.match(failed.failedReason!, /Invalid request from key/);
      assert.match(failed.failedReason!, /X-Amz-Signature=\[redacted\]/);
    });
  });

  describe('changes', () => {
    it('refuses every change when read-only (QUEUE_DASHBOARD_WRITE off), with 403', async () => {
      const refused: Array<[string, string, unknown?]> = [
        ['PUT', jobPath(chatQueue, ids.failed, '/retry')],
        ['PUT', jobPath(chatQueue, ids.failed, '/clean')],
        ['PUT', `/admin/queues/api/queues/${encodeURIComponent(chatQueue)}/retry/failed`],
        ['PUT', `/admin/queues/api/queues/${encodeURIComponent(chatQueue)}/clean/completed`],
        ['PUT', '/admin/queues/api/queues/pause'],
        ['POST', `/admin/queues/api/queues/${encodeURIComponent(chatQueue)}/add`, { name: 'x', data: {} }],
        ['PATCH', jobPath(chatQueue, ids.failed, '/update-data'), { data: {} }],
        ['DELETE', jobPath(chatQueue, ids.failed)],
      ];
      for (const [method, path, body] of refused) {
        expectError(await call(gateway.url, method, path, bearer, body), 403, 'queue_dashboard_read_only');
        expectError(await call(gateway.url, method, path, cookieOf(admin), body), 403, 'queue_dashboard_read_only');
      }
      const job = await call(gateway.url, 'GET', jobPath(chatQueue, ids.failed), bearer);
      assert.equal(job.json.status, 'failed');
    });

    it(
      'with QUEUE_DASHBOARD_WRITE=on retries a failed job and removes a finished one, from the dashboard’s own ' +
        'origin',
      async () => {
        const own = { ...cookieOf(admin), origin: writer.url };
        // From another site the cookie would not even be sent (SameSite=Strict); with it and a foreign Origin: 403.
        expectError(
          await call(writer.url, 'PUT', jobPath(chatQueue, ids.failed, '/retry'), {
            ...cookieOf(admin),
            origin: 'https://evil.example',
          }),
          403,
          'csrf_failed',
        );
        expectError(
          await call(writer.url, 'PUT', jobPath(chatQueue, ids.failed, '/retry'), cookieOf(admin)),
          403,
          'csrf_failed',
        );

        const retried = await call(writer.url, 'PUT', jobPath(chatQueue, ids.failed, '/retry'), own);
        assert.equal(retried.status, 204, retried.text);
        // The fake answers normally now: the retried job runs again and completes.
        await waitFor(
          async () => (await call(writer.url, 'GET', jobPath(chatQueue, ids.failed), own)).json.status === 'completed',
          10_000,
          'the retried job completed',
        );

        const removed = await call(writer.url, 'PUT', jobPath(imageQueue, ids.edit, '/clean'), own);
        assert.equal(removed.status, 204, removed.text);
        assert.equal((await call(writer.url, 'GET', jobPath(imageQueue, ids.edit), own)).status, 404);
      },
    );

    it('never adds jobs, writes job data back or retries a completed job, even with writes on', async () => {
      const own = { ...cookieOf(admin), origin: writer.url };
      const queue = encodeURIComponent(chatQueue);
      expectError(
        await call(writer.url, 'POST', `/admin/queues/api/queues/${queue}/add`, own, {
          name: 'chat.completions',
          data: {},
        }),
        403,
        'queue_dashboard_forbidden',
      );
      expectError(
        await call(writer.url, 'POST', `/admin/queues/api/queues/${queue}/ADD`, own, {
          name: 'chat.completions',
          data: {},
        }),
        403,
        'queue_dashboard_forbidden',
      );
      expectError(
        await call(writer.url, 'PATCH', jobPath(chatQueue, ids.chat, '/update-data'), own, { data: {} }),
        403,
        'queue_dashboard_forbidden',
      );
      expectError(
        await call(writer.url, 'PUT', `/admin/queues/api/queues/${queue}/retry/completed`, own),
        403,
        'queue_dashboard_forbidden',
      );
      expectError(
        await call(writer.url, 'PUT', jobPath(chatQueue, ids.chat, '/retry'), own),
        403,
        'queue_dashboard_forbidden',
      );
      const job = await call(writer.url, 'GET', jobPath(chatQueue, ids.chat), own);
      assert.equal(job.json.status, 'completed');
    });
  });
});
