import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';

/*
 * Every mounted prefix (admin API, queue dashboard, console, /v1, probes and
 * metrics) asked for in the spellings an attacker tries: another letter
 * case, doubled slashes, percent-escaped letters, dot segments, and a detour
 * through another prefix. Each request goes out byte for byte (node:http,
 * not fetch, which would tidy the URL first). A spelling either means the
 * canonical path, and then that path's guard answers, or matches nothing and
 * is a 404; it is never served past its guard.
 */

const adminToken = 'path-spellings-admin-token';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

function raw(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<Answer> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: hostname,
        port,
        method,
        path,
        headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function errorCode(answer: Answer): string | null | undefined {
  const parsed = JSON.parse(answer.body) as { error?: { code?: string | null; message?: string; type?: string } };
  assert.ok(
    parsed.error && typeof parsed.error.message === 'string' && typeof parsed.error.type === 'string',
    `an OpenAI-shaped error: ${answer.body}`,
  );
  return parsed.error.code;
}

describe('path spellings: every guard holds whatever the spelling', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let apiKey: string;

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(7));
    gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_TOKEN: adminToken, MOCK_VENDOR: 'on' } });
    apiKey = (await createKey(redis, 'path-spellings')).key;
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('the admin API: another case matches nothing; slashes, escapes and dot segments reach the token check', async () => {
    for (const path of [
      '/ADMIN/accounts',
      '/Admin/accounts',
      '/admin/ACCOUNTS',
      '/ADMIN/keys',
      '/Admin/usage',
      '/%41dmin/accounts',
    ]) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 404, `${path}: ${answer.body}`);
      assert.equal(errorCode(answer), 'unknown_url', path);
    }
    for (const path of [
      '/admin//accounts',
      '//admin/accounts',
      '/%61dmin/accounts',
      '/ad%6Din/accounts',
      '/admin/./accounts',
      '/v1/../admin/accounts',
      '/v1/%2e%2e/admin/accounts',
      '/console/../admin/accounts',
      '/x/y/../../admin/accounts/',
    ]) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 401, `${path}: ${answer.body}`);
      assert.equal(errorCode(answer), 'invalid_admin_token', path);
    }
    // The writes the issue found open: none of them gets past the guard, in any spelling.
    for (const path of ['/ADMIN/accounts', '/admin//accounts', '/%61dmin/accounts', '/v1/../admin/accounts']) {
      const made = await raw(
        gateway.url,
        'POST',
        path,
        {},
        JSON.stringify({ email: 'mallory@example.com', role: 'admin' }),
      );
      assert.ok(made.status === 401 || made.status === 404, `${path}: ${made.status} ${made.body}`);
    }
    assert.equal(await redis.keys('*mallory*').then((keys) => keys.length), 0);
    // The canonical path it stands for is served to the token.
    const served = await raw(gateway.url, 'GET', '/admin//./accounts', { authorization: `Bearer ${adminToken}` });
    assert.equal(served.status, 200, served.body);
    assert.equal((JSON.parse(served.body) as { object: string }).object, 'list');
  });

  it('the queue dashboard: its guard runs on every spelling that means it', async () => {
    for (const path of [
      '/admin//queues',
      '/admin/./queues/api/queues',
      '/%61dmin/queues/api/queues',
      '/v1/../admin/queues/',
    ]) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.ok(answer.status === 401 || answer.status === 403, `${path}: ${answer.status}`);
      assert.equal(answer.headers['x-frame-options'], 'DENY', path);
    }
    for (const path of ['/ADMIN/queues', '/admin/QUEUES', '/Admin/Queues/api/queues']) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 404, `${path}: ${answer.status} ${answer.body.slice(0, 200)}`);
    }
  });

  it('the console: no write skips the CSRF check, and every page it serves carries its headers', async () => {
    for (const path of [
      '/console//api/keys',
      '/console/./api/keys',
      '/%63onsole/api/keys',
      '/console/api//keys',
      '/v1/../console/api/keys',
    ]) {
      const answer = await raw(gateway.url, 'POST', path, {}, JSON.stringify({ name: 'x' }));
      assert.equal(answer.status, 403, `${path}: ${answer.body}`);
      assert.equal(errorCode(answer), 'csrf_failed', path);
    }
    for (const path of ['/CONSOLE/api/keys', '/Console/api/keys', '/console/API/keys', '/console/Api/session']) {
      const answer = await raw(gateway.url, 'POST', path, {}, JSON.stringify({ name: 'x' }));
      assert.ok(
        answer.status === 403 || answer.status === 404 || answer.status === 405,
        `${path}: ${answer.status} ${answer.body}`,
      );
    }
    for (const path of ['/CONSOLE/', '/Console/keys', '/CONSOLE/api/session']) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 404, `${path}: ${answer.status}`);
      assert.match(String(answer.headers['content-type']), /application\/json/, path);
    }
    for (const path of ['/console/', '/console//keys', '/%63onsole/keys', '/console/./usage']) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.ok(answer.headers['content-security-policy'], `${path}: CSP`);
      assert.equal(answer.headers['x-frame-options'], 'DENY', path);
      assert.equal(answer.headers['x-content-type-options'], 'nosniff', path);
    }
  });

  it('/v1: the API key is asked for on every spelling that means it, and another case is a 404', async () => {
    for (const path of [
      '/v1//models',
      '//v1/models',
      '/%761/models',
      '/v1/./models',
      '/admin/../v1/models',
      '/v1/%6dodels',
    ]) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 401, `${path}: ${answer.body}`);
      assert.equal(errorCode(answer), 'invalid_api_key', path);
      const keyed = await raw(gateway.url, 'GET', path, { authorization: `Bearer ${apiKey}` });
      assert.equal(keyed.status, 200, `${path} with a key: ${keyed.body.slice(0, 200)}`);
    }
    const posted = await raw(
      gateway.url,
      'POST',
      '/v1//chat/./completions',
      {},
      JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }] }),
    );
    assert.equal(posted.status, 401, posted.body);
    for (const path of ['/V1/models', '/v1/MODELS', '/V1/chat/completions']) {
      const answer = await raw(gateway.url, 'GET', path, { authorization: `Bearer ${apiKey}` });
      assert.equal(answer.status, 404, `${path}: ${answer.body}`);
    }
  });

  it('/metrics: served at its exact path only; every other spelling is an unknown URL (issue 45)', async () => {
    for (const path of ['/metrics', '/metrics?format=text']) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 200, path);
      assert.match(answer.body, /^# HELP switchyard_/m, path);
    }
    for (const path of [
      '/metrics/',
      '/metrics/.',
      '/metrics/./',
      '/x/../metrics',
      '/x/../metrics/',
      '/v1/../metrics',
      '/./metrics',
      '//metrics',
      '/metrics//',
      '/METRICS',
      '/Metrics',
      '/%6detrics',
      '/%6Detrics',
      '/%6D%65%74%72%69%63%73',
      '/metrics%2f',
      '/metrics%2F',
    ]) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 404, `${path}: ${answer.status} ${answer.body.slice(0, 200)}`);
      assert.equal(errorCode(answer), 'unknown_url', path);
      assert.doesNotMatch(answer.body, /switchyard_/, path);
    }
  });

  it('malformed escapes are a 400, never a crash', async () => {
    for (const path of ['/admin/%zzaccounts', '/v1/models%', '/%00admin/accounts', '/v1/models/%0']) {
      const answer = await raw(gateway.url, 'GET', path);
      assert.equal(answer.status, 400, `${path}: ${answer.body}`);
      assert.equal(errorCode(answer), 'invalid_path', path);
    }
    const ready = await raw(gateway.url, 'GET', '/readyz');
    assert.equal(ready.status, 200);
  });
});
