import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** A raw HTTP/1.1 request, so headers such as `Connection` and sizes Node's fetch would refuse go out as written. */
function rawRequest(
  url: string,
  options: { method?: string; path: string; headers?: Record<string, string>; body?: Buffer | string },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const target = new URL(options.path, url);
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method: options.method ?? 'POST',
        headers: options.headers,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.setTimeout(60_000, () => req.destroy(new Error('no answer within 60 s')));
    req.end(options.body);
  });
}

/** Bytes written as they are on a fresh socket; resolves with everything the server sent before closing. */
function rawExchange(url: string, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(url);
    const socket = connect({ host: hostname, port: Number(port) }, () => socket.write(raw));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.on('error', reject);
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
  });
}

function assertOpenAIError(
  answer: Answer,
  status: number,
  expected: Partial<ErrorBody['error']> = {},
): ErrorBody['error'] {
  assert.equal(answer.status, status, answer.text);
  const body = JSON.parse(answer.text) as ErrorBody;
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
  assert.ok(body.error.message.length > 0);
  for (const [name, value] of Object.entries(expected))
    assert.equal(body.error[name as keyof ErrorBody['error']], value, `${name}: ${answer.text}`);
  return body.error;
}

function multipart(
  boundary: string,
  parts: Array<{ name: string; value?: string; filename?: string; type?: string; data?: Buffer }>,
): Buffer {
  const chunks: Buffer[] = [];
  for (const part of parts) {
    const disposition = `form-data; name="${part.name}"${part.filename ? `; filename="${part.filename}"` : ''}`;
    const head = `--${boundary}\r\nContent-Disposition: ${disposition}\r\n${part.type ? `Content-Type: ${part.type}\r\n` : ''}\r\n`;
    chunks.push(Buffer.from(head), part.data ?? Buffer.from(part.value ?? ''), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return Buffer.concat(chunks);
}

/** A tiny valid WAV, enough for the mock transcriber. */
function wav(): Buffer {
  const samples = Buffer.alloc(1600);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + samples.length, 4);
  header.write('WAVEfmt ', 8);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(8000, 24);
  header.writeUInt32LE(16000, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36);
  header.writeUInt32LE(samples.length, 40);
  return Buffer.concat([header, samples]);
}

// Each case here once crashed, froze or misled: one request from a key holder must never do that.
describe('hostile input', () => {
  let redis: Redis;
  let redisUrl: string;
  let gateway: GatewayProcess;
  let trusting: GatewayProcess;
  let apiKey: string;

  before(async () => {
    ({ redis, url: redisUrl } = await freshRedis(6));
    apiKey = (await createKey(redis)).key;
    [gateway, trusting] = await Promise.all([
      startGateway({ env: { REDIS_URL: redisUrl } }),
      startGateway({ env: { REDIS_URL: redisUrl, TRUST_PROXY: 'on', WORKER_QUEUES: 'chat' } }),
    ]);
  });

  after(async () => {
    await Promise.all([gateway?.stop(), trusting?.stop()]);
    redis?.disconnect();
  });

  const auth = () => ({ authorization: `Bearer ${apiKey}` });
  const postJson = (path: string, body: unknown, headers: Record<string, string> = {}, target = gateway) =>
    rawRequest(target.url, {
      path,
      headers: { ...auth(), 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  const postForm = (path: string, boundary: string, body: Buffer) =>
    rawRequest(gateway.url, {
      path,
      headers: { ...auth(), 'content-type': `multipart/form-data; boundary=${boundary}` },
      body,
    });

  /** The worst event-loop stall since the previous read, as the gateway measures it. */
  const loopStallMs = async () =>
    (
      JSON.parse((await rawRequest(gateway.url, { method: 'GET', path: '/readyz' })).text) as {
        event_loop_max_ms: number;
      }
    ).event_loop_max_ms;

  async function assertStillServes(): Promise<void> {
    const ok = await postJson('/v1/chat/completions', {
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'still there?' }],
    });
    assert.equal(ok.status, 200, ok.text);
  }

  it('answers a multipart body cut short with a 400 on every upload endpoint, and stays up', async () => {
    const cut = Buffer.concat([
      Buffer.from('--B\r\nContent-Disposition: form-data; name="model"\r\n\r\nmock-transcribe\r\n'),
      Buffer.from(
        '--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: ' +
          'audio/wav\r\n\r\nRIFFxxxx',
      ),
    ]);
    for (const path of ['/v1/audio/transcriptions', '/v1/images/edits', '/v1/videos']) {
      assertOpenAIError(await postForm(path, 'B', cut), 400, {
        type: 'invalid_request_error',
        code: 'invalid_multipart',
      });
    }
    assert.equal(gateway.proc.exitCode, null, 'the process is still running');
    await assertStillServes();
  });

  it('counts a huge one-character prompt without freezing the event loop', async () => {
    await loopStallMs();
    const runs = [
      postJson('/v1/chat/completions', {
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'a'.repeat(130_000) }],
      }),
      // CJK with no spaces is one pre-token: the slowest case for byte-pair encoding.
      postJson('/v1/chat/completions', {
        model: 'mock-chat',
        messages: [{ role: 'user', content: '漢字'.repeat(100_000) }],
      }),
      postJson('/v1/embeddings', {
        model: 'mock-embedding',
        input: Array.from({ length: 60 }, (_, i) => `${i}${'b'.repeat(9000)}`),
      }),
      postJson('/v1/completions', { model: 'mock-chat', prompt: 'c'.repeat(200_000) }),
    ];
    const answers = await Promise.all(runs);
    const stall = await loopStallMs();
    assert.equal(answers[0]!.status, 200, answers[0]!.text);
    const usage = (JSON.parse(answers[0]!.text) as { usage: { prompt_tokens: number } }).usage;
    assert.ok(usage.prompt_tokens > 10_000 && usage.prompt_tokens < 130_000, `prompt tokens ${usage.prompt_tokens}`);
    // 200,000 CJK characters are about that many tokens: more than mock-chat's 128k window, refused before any queue.
    assertOpenAIError(answers[1]!, 400, { code: 'context_length_exceeded', param: 'messages' });
    assert.equal(answers[2]!.status, 200, answers[2]!.text);
    assert.ok([200, 400].includes(answers[3]!.status), answers[3]!.text);
    // Before the fix the first request alone held the loop for 16-19 s.
    assert.ok(stall < 500, `worst event-loop stall ${stall} ms`);
  });

  it('holds no request on the event loop for long, however many messages and parts a body has within the limits', async () => {
    const responsesInput = (messages: number, parts: number) =>
      Array.from({ length: messages }, (_, i) => ({
        role: 'user',
        content: Array.from({ length: parts }, (_, j) => ({ type: 'input_text', text: `m${i}p${j} hi` })),
      }));
    const chatMessages = (messages: number, parts: number) =>
      Array.from({ length: messages }, (_, i) => ({
        role: 'user',
        content: Array.from({ length: parts }, (_, j) => ({ type: 'text', text: `m${i}p${j} hi` })),
      }));
    // gemini-2.5-flash's million-token window lets the large ones through to the queue: the whole path is measured, not
    // just a refusal.
    const cases: Array<{ path: string; body: unknown; expect: number[] }> = [
      // 110,000 objects and arrays: past the bound on a body's containers, refused before it is parsed.
      {
        path: '/v1/responses',
        body: { model: 'gemini-2.5-flash', max_output_tokens: 16, input: responsesInput(9_999, 10) },
        expect: [400],
      },
      {
        path: '/v1/chat/completions',
        body: { model: 'gemini-2.5-flash', max_tokens: 16, messages: chatMessages(9_999, 10) },
        expect: [400],
      },
      // Just inside it: validated, translated, counted and queued in slices.
      {
        path: '/v1/responses',
        body: { model: 'gemini-2.5-flash', max_output_tokens: 16, input: responsesInput(9_999, 3) },
        expect: [200],
      },
      {
        path: '/v1/chat/completions',
        body: { model: 'gemini-2.5-flash', max_tokens: 16, messages: chatMessages(9_999, 3) },
        expect: [200],
      },
    ];
    for (const { path, body, expect } of cases) {
      // Before the bound and the slices one such Responses body held the loop 400-575 ms, four 1.28 s; each step now
      // stays under 50 ms on an idle machine (npm run bench is where that is measured). A shared CI machine adds
      // pauses of its own (another tenant's burst, a major collection of these megabyte bodies' garbage): the
      // best of three rounds must stay under 200 ms, and no round may come near what one unsliced body took.
      const stalls: number[] = [];
      for (let round = 0; round < 3; round++) {
        await loopStallMs();
        // Four at once, as a client with a few connections would send them.
        const answers = await Promise.all(Array.from({ length: 4 }, () => postJson(path, body)));
        stalls.push(await loopStallMs());
        for (const answer of answers) {
          assert.ok(expect.includes(answer.status), `${path}: ${answer.status} ${answer.text.slice(0, 300)}`);
          if (answer.status === 400) assertOpenAIError(answer, 400, { code: 'too_many_elements' });
        }
        if (stalls.at(-1)! < 200) break;
      }
      assert.ok(Math.min(...stalls) < 200, `${path}: worst event-loop stall of each round ${stalls.join(', ')} ms`);
      assert.ok(Math.max(...stalls) < 1000, `${path}: worst event-loop stall of each round ${stalls.join(', ')} ms`);
    }
  });

  it('refuses an inline image larger than any vendor takes before parsing it, without holding the loop', async () => {
    // 47 MB of data URL, inside the 50 MB body limit: before the cap one such chat held the loop 485-678 ms (parsed,
    // validated, translated and serialised whole), four at once 1.5 s, and the api's RSS went from 0.77 to 1.38 GB.
    const body = JSON.stringify({
      model: 'gpt-4o',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this?' },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(47_000_000)}` } },
          ],
        },
      ],
    });
    const stalls: number[] = [];
    for (let round = 0; round < 3; round++) {
      await loopStallMs();
      const answers = await Promise.all(Array.from({ length: 4 }, () => postJson('/v1/chat/completions', body)));
      stalls.push(await loopStallMs());
      for (const answer of answers)
        assertOpenAIError(answer, 400, { code: 'image_too_large', param: 'messages[0].content[1].image_url.url' });
      // Joining, decoding and scanning a 47 MB body are a turn of the loop each, some 50 ms apiece on an idle machine.
      if (stalls.at(-1)! < 200) break;
    }
    assert.ok(Math.min(...stalls) < 200, `worst event-loop stall of each round ${stalls.join(', ')} ms`);
    assert.ok(Math.max(...stalls) < 1000, `worst event-loop stall of each round ${stalls.join(', ')} ms`);
  });

  it('refuses JSON nested thousands deep with a 400 naming the field, on every JSON endpoint', async () => {
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    const cases: Array<[string, string, string]> = [
      [
        '/v1/chat/completions',
        `{"model":"mock-chat","messages":[{"role":"user","content":${deep(5000)}}]}`,
        'messages',
      ],
      ['/v1/completions', `{"model":"mock-chat","prompt":"x","metadata":${deep(5000)}}`, 'metadata'],
      ['/v1/embeddings', `{"model":"mock-embedding","input":${deep(5000)}}`, 'input'],
      ['/v1/images/generations', `{"model":"mock-image","prompt":"x","extra":{"a":${deep(100_000)}}}`, 'extra'],
      ['/v1/videos', `{"model":"mock-video","prompt":"x","tools":${deep(5000)}}`, 'tools'],
    ];
    for (const [path, body, param] of cases) {
      assertOpenAIError(await postJson(path, body), 400, { code: 'nesting_too_deep', param });
    }
    // Width costs the request thread as much as depth: 100k keys once stalled the loop for a quarter second.
    const wide = `{"model":"mock-embedding","input":"x",${Array.from({ length: 20_000 }, (_, i) => `"k${i}":${i}`).join(',')}}`;
    assertOpenAIError(await postJson('/v1/embeddings', wide), 400, { code: 'too_many_elements' });
    // Nesting a real request needs (a JSON schema a few levels deep) still passes.
    let schema: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 10; i++) schema = { type: 'object', properties: { inner: schema }, required: ['inner'] };
    const ok = await postJson('/v1/chat/completions', {
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ type: 'function', function: { name: 'deep', parameters: schema } }],
    });
    assert.equal(ok.status, 200, ok.text);
  });

  it('logs the status the client got, errors included', async () => {
    const answers = [
      await rawRequest(gateway.url, {
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      }),
      await postJson('/v1/chat/completions', '{"model":'),
      await rawRequest(gateway.url, { method: 'GET', path: '/v1/no-such-thing', headers: auth() }),
    ];
    const ids = answers.map((answer) => String(answer.headers['x-request-id']));
    const logged = () =>
      gateway.logs
        .filter((line) => line.includes('"msg":"request"'))
        .map((line) => JSON.parse(line) as { reqId: string; status: number })
        .filter((line) => ids.includes(line.reqId));
    // The log is written asynchronously: wait for the three lines, then read what they say.
    await waitFor(() => logged().length >= 3, 5000, 'three access-log lines');
    assert.deepEqual(
      ids.map((id) => logged().find((line) => line.reqId === id)?.status),
      answers.map((answer) => answer.status),
    );
    assert.deepEqual(
      answers.map((answer) => answer.status),
      [401, 400, 404],
    );
  });

  it('builds file links from PUBLIC_BASE_URL or the Host, and believes X-Forwarded-Host only with TRUST_PROXY', async () => {
    const body = { model: 'mock-image', prompt: 'a red square', response_format: 'url' };
    const forged = { 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https' };
    const plain = await postJson('/v1/images/generations', body, forged);
    assert.equal(plain.status, 200, plain.text);
    const link = new URL((JSON.parse(plain.text) as { data: Array<{ url: string }> }).data[0]!.url);
    assert.equal(link.host, new URL(gateway.url).host, 'a client cannot point the link elsewhere');
    assert.equal(link.protocol, 'http:');
    // The trusting gateway serves only chat: enqueueing its image job is enough to see the link base it records.
    const trusted = await postJson('/v1/images/generations', body, { ...forged, prefer: 'respond-async' }, trusting);
    assert.equal(trusted.status, 202, trusted.text);
    const job = (JSON.parse(trusted.text) as { id: string }).id;
    const data = JSON.parse((await redis.hget(`bull:{image}:${job}`, 'data')) ?? '{}') as { baseUrl?: string };
    assert.equal(data.baseUrl, 'https://evil.example', 'behind a trusted proxy the forwarded host is the public one');
  });

  it('answers oversized headers and URLs with an OpenAI-shaped 431', async () => {
    assertOpenAIError(
      await rawRequest(gateway.url, {
        method: 'GET',
        path: '/v1/models',
        headers: { ...auth(), 'x-padding': 'p'.repeat(20_000) },
      }),
      431,
      { code: 'request_header_too_large' },
    );
    assertOpenAIError(
      await rawRequest(gateway.url, { method: 'GET', path: `/v1/models/${'m'.repeat(20_000)}`, headers: auth() }),
      431,
    );
    // Requests Node would answer with a bare status or a closed socket: no Host on HTTP/1.1, CONNECT, TRACE.
    for (const raw of [
      'GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n',
      'CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n',
      'TRACE /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    ]) {
      const answer = await rawExchange(gateway.url, raw);
      assert.match(answer, /^HTTP\/1\.1 4\d\d /, raw);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as ErrorBody;
      assert.ok(body.error.message.length > 0, answer);
    }
    await assertStillServes();
  });

  it('refuses too many files or fields instead of dropping them', async () => {
    const files = Array.from({ length: 21 }, (_, i) => ({
      name: 'image[]',
      filename: `${i}.png`,
      type: 'image/png',
      data: Buffer.from('x'),
    }));
    assertOpenAIError(
      await postForm('/v1/images/edits', 'F', multipart('F', [{ name: 'model', value: 'dall-e-2' }, ...files])),
      400,
      {
        code: 'too_many_files',
      },
    );
    const fields = Array.from({ length: 151 }, (_, i) => ({ name: `f${i}`, value: 'v' }));
    assertOpenAIError(
      await postForm(
        '/v1/audio/transcriptions',
        'F',
        multipart('F', [{ name: 'model', value: 'mock-transcribe' }, ...fields]),
      ),
      400,
      {
        code: 'too_many_fields',
      },
    );
  });

  it('refuses number fields that are not finite numbers, and an empty one, with what was sent', async () => {
    for (const value of ['1e999', 'abc', 'NaN', '']) {
      const form = multipart('N', [
        { name: 'model', value: 'mock-transcribe' },
        { name: 'temperature', value },
        { name: 'file', filename: 'a.wav', type: 'audio/wav', data: wav() },
      ]);
      const error = assertOpenAIError(await postForm('/v1/audio/transcriptions', 'N', form), 400, {
        param: 'temperature',
      });
      assert.match(error.message, /expected a finite number, but got/);
      assert.doesNotMatch(error.message, /got a number/);
    }
    const edit = multipart('N', [
      { name: 'model', value: 'dall-e-2' },
      { name: 'prompt', value: 'x' },
      { name: 'n', value: 'abc' },
    ]);
    assertOpenAIError(await postForm('/v1/images/edits', 'N', edit), 400, { param: 'n' });
  });

  it('closes a stream whose client asked for Connection: close', async () => {
    const answer = await postJson(
      '/v1/chat/completions',
      { model: 'mock-chat', stream: true, messages: [{ role: 'user', content: 'hi' }] },
      { connection: 'close' },
    );
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.headers.connection, 'close');
    assert.match(answer.text, /data: \[DONE\]/);
  });
});
