import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRedactor } from '../../api/console/queue-dashboard-redact.js';

const vendorKey = 'sk-vendor-0123456789abcdef';
const redactor = createRedactor([vendorKey, 'tiny', undefined]);
const id = 'req_0123456789abcdef0123456789abcdef';

describe('queue dashboard redaction', () => {
  it('replaces known secrets and secret-shaped text, keeping the words around them', () => {
    const cases: Array<[string, string]> = [
      [`Incorrect API key provided: ${vendorKey}.`, 'Incorrect API key provided: [redacted].'],
      ['pasted sy-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg here', 'pasted [redacted] here'],
      ['Authorization: Bearer abc.def', 'Authorization: Bearer [redacted]'],
      ['authorization=Basic dXNlcjpwYXNzd29yZA==', 'authorization=Basic [redacted]'],
      ['{"x-api-key":"k-123","password": "hunter2"}', '{"x-api-key":"[redacted]","password": "[redacted]"}'],
      [
        'https://user:pw@host.test/a?x=1&signature=abc&expires=2',
        'https://[redacted]@host.test/a?x=1&signature=[redacted]&expires=2',
      ],
      [
        'https://b.s3.test/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=ff00',
        'https://b.s3.test/o?X-Amz-Credential=[redacted]&X-Amz-Signature=[redacted]',
      ],
      ['keys AIzaSyA1234567890abcdefghijklmnopq and AKIAIOSFODNN7EXAMPLE', 'keys [redacted] and [redacted]'],
      ['jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz end', 'jwt [redacted] end'],
      ['aws wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'aws [redacted]'],
      ['opaque 0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c', 'opaque [redacted]'],
      ['-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----', '[redacted]'],
    ];
    for (const [input, expected] of cases) assert.equal(redactor.text(input), expected, input);
  });

  it('leaves ids, paths, prose and token counts alone', () => {
    for (const text of [
      `job ${id} of key_0123456789abcdef`,
      `uploads/${id}/0-1a2b3c4d-photo.png`,
      '    at fail (/app/workers/processor.ts:75:13)',
      'max_tokens: 100, "prompt_tokens": 12',
      'The quick brown fox jumps over the lazy dog. '.repeat(8),
      'a tiny word',
    ]) {
      assert.equal(redactor.text(text), text);
    }
  });

  it('replaces inline uploads by a reference', () => {
    const png = Buffer.alloc(300, 7).toString('base64');
    assert.equal(redactor.text(`see data:image/png;base64,${png} there`), 'see [upload: image/png, 300 bytes] there');
    assert.equal(redactor.text(Buffer.alloc(200, 1).toString('base64')), '[base64: 200 bytes]');
    const value = redactor.value({
      input_audio: { data: Buffer.alloc(30, 2).toString('base64'), format: 'wav' },
      images: [{ key: `uploads/${id}/0-ab-x.png`, contentType: 'image/png', size: 123 }],
      embedding: Array.from({ length: 100 }, () => 0.5),
      raw: { type: 'Buffer', data: [1, 2, 3] },
    });
    assert.deepEqual(value, {
      input_audio: { data: '[base64: 30 bytes]', format: 'wav' },
      images: [{ key: `uploads/${id}/0-ab-x.png`, contentType: 'image/png', size: 123 }],
      embedding: '[100 numbers]',
      raw: '[binary: 3 bytes]',
    });
  });

  it('redacts secret-named fields whole, at any depth', () => {
    assert.deepEqual(
      redactor.value({
        a: {
          headers: { Authorization: 'x', 'X-Goog-Api-Key': 'y' },
          api_key: 'z',
          client_secret: { n: 1 },
          token: 'Hello',
        },
      }),
      {
        a: {
          headers: { Authorization: '[redacted]', 'X-Goog-Api-Key': '[redacted]' },
          api_key: '[redacted]',
          client_secret: '[redacted]',
          token: 'Hello',
        },
      },
    );
  });

  it('shows a JSON return value parsed and redacted, any other as text', () => {
    const body = JSON.stringify({
      data: [
        {
          b64_json: Buffer.alloc(70, 3).toString('base64'),
          url: 'https://gw.test/v1/files/x.png?expires=1&signature=abc',
        },
      ],
    });
    assert.deepEqual(redactor.returnValue({ body }), {
      body: {
        data: [
          { b64_json: '[base64: 70 bytes]', url: 'https://gw.test/v1/files/x.png?expires=1&signature=[redacted]' },
        ],
      },
    });
    assert.deepEqual(redactor.returnValue({ body: `data: {"k":"${vendorKey}"}\n\n` }), {
      body: 'data: {"k":"[redacted]"}\n\n',
    });
    assert.equal(redactor.returnValue(null), null);
  });

  it('keeps the shape of whole API answers (metrics) in `strings`', () => {
    const metrics = { data: Array.from({ length: 100 }, (_, i) => i), meta: { note: `by ${vendorKey}` } };
    assert.deepEqual(redactor.strings(metrics), { data: metrics.data, meta: { note: 'by [redacted]' } });
    // What the formatters made is not redacted twice.
    const formatted = redactor.value({ note: `by ${vendorKey}` });
    assert.equal(
      (redactor.strings({ jobs: [{ data: formatted }] }) as { jobs: Array<{ data: unknown }> }).jobs[0]!.data,
      formatted,
    );
  });

  it('cuts very long strings', () => {
    const long = `${'word '.repeat(5000)}`;
    assert.match(redactor.text(long), /… \[5000 more characters\]$/);
  });

  it('shows at most 8,000 characters of one job, however many strings it holds', () => {
    const data = {
      parts: Array.from({ length: 20 }, (_, i) => `${String(i).padStart(2, '0')} ${'word '.repeat(199)}ok`),
    };
    const shown = (redactor.value(data) as { parts: string[] }).parts;
    assert.ok(
      shown.slice(0, 8).join('') === data.parts.slice(0, 8).join(''),
      'the first 8,000 characters are shown whole',
    );
    assert.equal(shown[8], '[1000 characters not shown]');
    assert.equal(shown.at(-1), '[1000 characters not shown]');
    // The budget is per job: the next one shows its text again.
    assert.equal((redactor.value({ note: 'short' }) as { note: string }).note, 'short');
  });
});
