import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import type { Redis } from 'ioredis';
import { readBill } from '../../shared/money/billing.js';
import { maxSpeechCharacters, speechCharacters, withinCharacters } from '../../shared/schemas/speech.js';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';

/*
 * `POST /v1/audio/speech` as an attacker tries it, against one gateway on the mock: odd spellings of the path,
 * bodies huge, chunked, not JSON or with duplicate keys, `input` at the limit counted in code points (what is spoken
 * and billed is counted the same way), odd values of every field, `Cache-Control` spellings, a burst of requests, and
 * a client that leaves mid-audio. Each request goes out byte for byte (node:http): fetch would tidy the path.
 */

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/**
 * The mock speaks 60 ms a character (a quarter of a second at least), 24 kHz 16-bit mono: pcm bytes for `characters`.
 */
const pcmBytesFor = (characters: number) => Math.max(6000, Math.round(characters * 0.06 * 24_000)) * 2;

describe('the speech limit, counted in code points without walking a huge text', () => {
  it('agrees with the count at every length around the limit, in one-unit and two-unit characters', () => {
    for (const unit of ['a', '😀', 'e\u0301']) {
      for (let length = maxSpeechCharacters - 3; length <= maxSpeechCharacters * 2 + 3; length += 1) {
        const text = unit.repeat(Math.ceil(length / unit.length)).slice(0, length);
        assert.equal(
          withinCharacters(text, maxSpeechCharacters),
          speechCharacters(text) <= maxSpeechCharacters,
          `${JSON.stringify(unit)} × ${length} units`,
        );
      }
    }
    assert.equal(withinCharacters('a'.repeat(30_000_000), maxSpeechCharacters), false);
  });
});

describe('POST /v1/audio/speech under attack', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let key: string;
  let account: string;

  /** Sends a body (a string, or pieces written one by one: chunked) and reads the whole answer. */
  const send = (path: string, body: string | string[], headers: Record<string, string> = {}): Promise<Answer> => {
    const { hostname, port } = new URL(gateway.url);
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: hostname,
          port,
          method: 'POST',
          path,
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
          );
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      if (typeof body === 'string') req.end(body);
      else {
        for (const piece of body) req.write(piece);
        req.end();
      }
    });
  };
  const speak = (fields: Record<string, unknown>, headers: Record<string, string> = {}) =>
    send(
      '/v1/audio/speech',
      JSON.stringify({ model: 'mock-speech', voice: 'alloy', response_format: 'pcm', ...fields }),
      headers,
    );
  const errorOf = (answer: Answer) =>
    (
      JSON.parse(answer.body.toString()) as {
        error: { message: string; type: string; param: string | null; code: string | null };
      }
    ).error;

  before(async () => {
    const fresh = await freshRedis(12);
    redis = fresh.redis;
    gateway = await startGateway({
      env: { REDIS_URL: fresh.url, MOCK_VENDOR: 'on', MAX_BODY_BYTES: String(40 * 1024 * 1024) },
    });
    ({ key, account } = await paidAccountKey(redis, 1_000_000_000));
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it(
    'path spellings: slashes, dot segments, escaped letters and a trailing slash speak; another case and an ' +
      'escaped slash are 404',
    async () => {
      const body = JSON.stringify({ model: 'mock-speech', input: 'hi', voice: 'alloy', response_format: 'pcm' });
      for (const path of [
        '/v1/audio/speech',
        '/v1/audio/speech/',
        '//v1/audio//speech',
        '/v1/audio/./speech',
        '/v1/x/../audio/speech',
        '/v1/audio/%73peech',
      ]) {
        const answer = await send(path, body);
        assert.equal(answer.status, 200, `${path}: ${answer.body.toString().slice(0, 200)}`);
        assert.equal(answer.body.length, pcmBytesFor(2), path);
      }
      for (const path of ['/v1/Audio/Speech', '/V1/audio/speech', '/v1/audio%2Fspeech', '/v1/audio/speech/x']) {
        const answer = await send(path, body);
        assert.equal(answer.status, 404, path);
        assert.equal(errorOf(answer).code, 'unknown_url', path);
      }
    },
  );

  it(
    'bodies: not JSON, another content type, chunked byte by byte, duplicate keys (the last one), unknown fields ' +
      'and __proto__ ignored',
    async () => {
      const notJson = await send('/v1/audio/speech', 'model=mock-speech&input=hi');
      assert.equal(notJson.status, 400);
      assert.match(errorOf(notJson).message, /JSON/);
      const plain = await send('/v1/audio/speech', '{}', { 'content-type': 'text/plain' });
      assert.equal(plain.status, 400);
      const whole = JSON.stringify({ model: 'mock-speech', input: 'chunked', voice: 'alloy', response_format: 'pcm' });
      const chunked = await send('/v1/audio/speech', [...whole], { 'transfer-encoding': 'chunked' });
      assert.equal(chunked.status, 200);
      assert.equal(chunked.body.length, pcmBytesFor('chunked'.length));
      const twice = await send(
        '/v1/audio/speech',
        '{"model":"mock-speech","voice":"alloy","input":"a","input":"the last ' +
          'input","response_format":"wav","response_format":"pcm"}',
      );
      assert.equal(twice.status, 200);
      assert.equal(twice.headers['content-type'], 'audio/pcm');
      assert.equal(twice.body.length, pcmBytesFor('the last input'.length));
      const extra = await send(
        '/v1/audio/speech',
        '{"model":"mock-speech","voice":"alloy","input":"ab","response_format":"pcm","foo":{"bar":1},"__proto__":{"response_format":"wav"}}',
      );
      assert.equal(extra.status, 200);
      assert.equal(extra.headers['content-type'], 'audio/pcm');
    },
  );

  it(
    'input counted in code points: 4,096 emoji (8,192 UTF-16 units) are spoken as 4,096 characters, 4,097 are a ' +
      '400, 30 MB a 400 at once',
    async () => {
      const emoji = '😀'.repeat(4096);
      const spoken = await speak({ input: emoji });
      assert.equal(spoken.status, 200);
      assert.equal(spoken.body.length, pcmBytesFor(4096), 'spoken (and billed) as 4,096 characters');
      const combining = await speak({ input: 'e\u0301'.repeat(2048) });
      assert.equal(combining.status, 200, 'a letter and its combining mark are two code points: 4,096');
      assert.equal(combining.body.length, pcmBytesFor(4096));
      for (const input of [`${emoji}😀`, 'e\u0301'.repeat(2049), 'a'.repeat(30_000_000)]) {
        const answer = await speak({ input });
        assert.equal(answer.status, 400);
        assert.deepEqual([errorOf(answer).param, errorOf(answer).code], ['input', 'invalid_value']);
        assert.match(errorOf(answer).message, /at most 4096 characters/);
      }
      const tooLongInstructions = await speak({ input: 'hi', instructions: 'x'.repeat(9000) });
      assert.equal(tooLongInstructions.status, 400);
      assert.equal(errorOf(tooLongInstructions).param, 'instructions');
    },
  );

  it(
    'odd values: speed as a string, 1e309, null or out of range, response_format and stream_format in another ' +
      'case, voices of every wrong shape: a 400 naming the field',
    async () => {
      const cases: Array<[string, string]> = [
        ['"speed":"1.5"', 'speed'],
        ['"speed":1e309', 'speed'],
        ['"speed":-1e309', 'speed'],
        ['"speed":null', 'speed'],
        ['"speed":0.2499', 'speed'],
        ['"speed":4.0000001', 'speed'],
        ['"response_format":"MP3"', 'response_format'],
        ['"response_format":" wav"', 'response_format'],
        ['"response_format":"opus"', 'response_format'],
        ['"stream_format":"SSE"', 'stream_format'],
        ['"stream_format":""', 'stream_format'],
        ['"voice":{"id":"voice_1"}', 'voice'],
        ['"voice":{"id":""}', 'voice.id'],
        ['"voice":{"id":"v","x":1}', 'voice'],
        ['"voice":[]', 'voice'],
        ['"voice":5', 'voice'],
        ['"voice":""', 'voice'],
      ];
      for (const [field, param] of cases) {
        const body = `{"model":"mock-speech","input":"hi","voice":"alloy","response_format":"pcm",${field}}`;
        const answer = await send('/v1/audio/speech', body);
        assert.equal(answer.status, 400, `${field}: ${answer.body.toString().slice(0, 200)}`);
        const error = errorOf(answer);
        assert.equal(error.param, param, `${field}: ${error.message}`);
        assert.equal(error.type, 'invalid_request_error');
      }
    },
  );

  it(
    'stream_format sse in every format the model speaks; Prefer: respond-async with sse is a 400 however it is ' +
      'spelled',
    async () => {
      for (const format of ['mp3', 'wav', 'pcm']) {
        const answer = await speak({ input: 'spoken as events', response_format: format, stream_format: 'sse' });
        assert.equal(answer.status, 200);
        const events = answer.body
          .toString()
          .split('\n\n')
          .filter((block) => block.startsWith('data: '))
          .map((block) => JSON.parse(block.slice(6)) as { type: string; audio?: string });
        assert.equal(events.at(-1)!.type, 'speech.audio.done', format);
        const audio = Buffer.concat(
          events
            .filter((event) => event.type === 'speech.audio.delta')
            .map((event) => Buffer.from(event.audio!, 'base64')),
        );
        assert.ok(audio.length > 0, format);
        if (format === 'pcm') assert.equal(audio.length, pcmBytesFor('spoken as events'.length));
        if (format === 'wav') assert.equal(audio.subarray(0, 4).toString(), 'RIFF');
      }
      for (const prefer of ['respond-async', 'RESPOND-ASYNC', 'wait=5, respond-async', 'respond-async; x=1']) {
        const answer = await speak({ input: 'ab', stream_format: 'sse' }, { prefer });
        assert.equal(answer.status, 400, prefer);
        assert.equal(errorOf(answer).param, 'stream_format');
      }
    },
  );

  it(
    'Cache-Control spellings: max-age in any case or quoted is cached, no-store or a bad max-age is not; the bytes ' +
      'are the same either way',
    async () => {
      const cases: Array<[string, boolean]> = [
        ['max-age=60', true],
        ['MAX-AGE=60', true],
        ['max-age="60"', true],
        ['max-age=60,,', true],
        ['max-age=60, no-store', false],
        ['max-age=-1', false],
        ['max-age=6e1', false],
      ];
      for (const [header, cached] of cases) {
        const fields = { input: `cached as ${header}` };
        const first = await speak(fields, { 'cache-control': header });
        const again = await speak(fields, { 'cache-control': header });
        assert.deepEqual(again.body, first.body, header);
        assert.equal(
          /^Switchyard; hit/.test(String(again.headers['cache-status'] ?? '')),
          cached,
          `${header}: ${again.headers['cache-status']}`,
        );
      }
    },
  );

  it(
    '64 requests at once: every one answered with its own audio, the balance moved by exactly what their records ' +
      'cost',
    async () => {
      const before = (await readBill(redis, account))!.balanceMicros!;
      const answers = await Promise.all(Array.from({ length: 64 }, (_, i) => speak({ input: `request number ${i}` })));
      for (const [i, answer] of answers.entries()) {
        assert.equal(answer.status, 200);
        assert.equal(answer.body.length, pcmBytesFor(`request number ${i}`.length));
      }
      const records = await Promise.all(
        answers.map((answer) => requestRecord(gateway.url, key, String(answer.headers['x-request-id']))),
      );
      const cost = records.reduce((sum, record) => sum + record.cost_micros, 0);
      assert.ok(cost > 0);
      await waitFor(
        async () => (await readBill(redis, account))!.reservedMicros === 0,
        10_000,
        'nothing left reserved',
      );
      assert.equal((await readBill(redis, account))!.balanceMicros, before - cost);
    },
  );

  it(
    'a client that leaves mid-audio: the vendor call is stopped, the request recorded cancelled, billed once what ' +
      'was spoken, nothing left reserved',
    async () => {
      const before = (await readBill(redis, account))!.balanceMicros!;
      const { hostname, port } = new URL(gateway.url);
      const input = `[mock:slow:50] ${'word '.repeat(400)}`;
      const { id, received } = await new Promise<{ id: string; received: number }>((resolve, reject) => {
        const req = request(
          {
            host: hostname,
            port,
            method: 'POST',
            path: '/v1/audio/speech',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          },
          (res) => {
            let bytes = 0;
            res.on('data', (chunk: Buffer) => {
              bytes += chunk.length;
              if (bytes > 10_000) {
                req.destroy();
                resolve({ id: String(res.headers['x-request-id']), received: bytes });
              }
            });
          },
        );
        req.on('error', (error) =>
          error.message.includes('aborted') || error.message.includes('socket hang up') ? undefined : reject(error),
        );
        req.end(JSON.stringify({ model: 'mock-speech', input, voice: 'alloy', response_format: 'pcm' }));
      });
      const record = await requestRecord(gateway.url, key, id);
      assert.equal(record.status, 'cancelled');
      assert.ok(
        record.audio_seconds < pcmBytesFor(input.length) / 48_000,
        `billed ${record.audio_seconds} s of audio, less than the whole text`,
      );
      assert.ok(received < pcmBytesFor(input.length));
      assert.ok(record.cost_micros > 0);
      await waitFor(
        async () => (await readBill(redis, account))!.reservedMicros === 0,
        10_000,
        'nothing left reserved',
      );
      assert.equal(
        (await readBill(redis, account))!.balanceMicros,
        before - record.cost_micros,
        'billed once, what the record says',
      );
    },
  );
});
