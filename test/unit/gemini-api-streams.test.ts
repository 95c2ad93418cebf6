import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GatewayError } from '../../shared/errors.js';
import { requestHash, streamForm } from '../../shared/cache/index.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import type { GeminiJob } from '../../shared/gemini.js';
import { answersGoogle, googleErrorBody } from '../../api/http/envelope.js';
import { arrayEnd, framingOf, lateErrorFrame, trailerOf } from '../../api/relay/stream-dialects.js';
import { cacheEcho, type EchoTarget } from '../../api/cache/answer-echo.js';

/** A request as the api sees it: its path, method and headers. */
const at = (path: string, headers: Record<string, string> = {}, method = 'POST') => ({
  path,
  method,
  get: (name: string) => headers[name] ?? '',
});

describe('Google’s streams on the api side', () => {
  it('labels each form and keeps it alive with a line break (no comment, which Google’s readers refuse)', () => {
    assert.deepEqual(framingOf('google-sse'), { contentType: 'text/event-stream; charset=utf-8', keepAlive: '\n' });
    assert.deepEqual(framingOf('google-array'), { contentType: 'application/json; charset=utf-8', keepAlive: '\n' });
    assert.equal(framingOf('openai').keepAlive, ': keep-alive\n\n');
    assert.match(framingOf('anthropic').keepAlive, /^event: ping\n/);
  });

  it('ends a stream that failed after output began with a Google error in its form', () => {
    const error = new GatewayError(503, 'The vendor is overloaded.', { headers: { 'retry-after': '2' } });
    const sse = lateErrorFrame('google-sse', error, 'req_1', true);
    assert.equal(
      sse,
      `data: ${JSON.stringify({ error: { code: 503, message: 'The vendor is overloaded.', status: 'UNAVAILABLE', details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '2s' }] } })}\n\n`,
    );
    const after = lateErrorFrame('google-array', error, 'req_1', true);
    assert.match(after, /^,\r\n\{"error":\{"code":503,.*\}\]$/);
    // The whole array stays JSON: one chunk, then the error as its last element.
    assert.equal((JSON.parse(`[{"candidates":[]}${after}`) as unknown[]).length, 2);
    const before = lateErrorFrame('google-array', error, 'req_1', false);
    assert.equal((JSON.parse(`\n\n${before}`) as Array<{ error: { status: string } }>)[0]!.error.status, 'UNAVAILABLE');
  });

  it('closes an array whatever its end holds, and answers for a lost end in each form', () => {
    assert.equal(arrayEnd(']', true), ']');
    assert.equal(arrayEnd('', true), ']');
    assert.equal(arrayEnd(']', false), '[]');
    assert.equal(arrayEnd('[]', false), '[]');
    assert.equal(trailerOf('google-array'), ']');
    assert.equal(trailerOf('google-sse'), '');
    assert.equal(trailerOf('anthropic'), '');
    assert.equal(trailerOf('openai'), 'data: [DONE]\n\n');
  });
});

describe('Google’s error shape', () => {
  it('is chosen by the path, or by Google’s key header on /v1/models', () => {
    assert.ok(answersGoogle(at('/v1beta/models')));
    assert.ok(answersGoogle(at('/v1beta/anything/else')));
    assert.ok(answersGoogle(at('/v1/models/gpt-4o:generateContent')));
    assert.ok(answersGoogle(at('/v1/models', { 'x-goog-api-key': 'k' }, 'GET')));
    assert.ok(answersGoogle(at('/v1/models/gpt-4o', { 'x-goog-api-key': 'k' }, 'GET')));
    assert.ok(!answersGoogle(at('/v1/models', {}, 'GET')));
    assert.ok(!answersGoogle(at('/v1/chat/completions', { 'x-goog-api-key': 'k' })));
    assert.ok(!answersGoogle(at('/v1/messages')));
  });

  it('says when to retry, which key is not valid, and what quota refused', () => {
    assert.deepEqual(
      googleErrorBody(
        new GatewayError(429, 'Slow down.', {
          code: 'rate_limit_exceeded',
          headers: { 'retry-after': '7', 'x-ratelimit-limit-requests': '1' },
        }),
      ),
      {
        error: {
          code: 429,
          message: 'Slow down.',
          status: 'RESOURCE_EXHAUSTED',
          details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '7s' }],
        },
      },
    );
    const key = googleErrorBody(new GatewayError(403, 'API key not valid.', { code: 'invalid_api_key' })).error;
    assert.equal(key.status, 'PERMISSION_DENIED');
    assert.deepEqual(key.details, [
      {
        '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
        reason: 'API_KEY_INVALID',
        domain: 'googleapis.com',
        metadata: { service: 'generativelanguage.googleapis.com' },
      },
    ]);
    const quota = googleErrorBody(
      new GatewayError(429, 'The balance is spent.', {
        code: 'insufficient_quota',
        headers: { 'x-should-retry': 'false' },
      }),
    ).error;
    assert.deepEqual(quota.details, [
      {
        '@type': 'type.googleapis.com/google.rpc.QuotaFailure',
        violations: [{ subject: 'api_key', description: 'The balance is spent.' }],
      },
    ]);
    assert.deepEqual(googleErrorBody(new GatewayError(504, 'Too late.')), {
      error: { code: 504, message: 'Too late.', status: 'DEADLINE_EXCEEDED' },
    });
  });
});

describe('Google’s answers in the response cache', () => {
  const job = (form?: 'sse' | 'array'): GeminiJob => ({
    gemini: { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] },
    chat: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
    model: 'my-alias',
    ...(form ? { form } : {}),
    inputTokens: 3,
  });
  const request = (form?: 'sse' | 'array'): EndpointRequest => ({ endpoint: 'gemini.generate', payload: job(form) });

  it('keeps one entry for a body and both stream forms; a stream follows only its own form', () => {
    assert.equal(requestHash(request(), 'gpt-4o-mini'), requestHash(request('sse'), 'gpt-4o-mini'));
    assert.equal(requestHash(request('sse'), 'gpt-4o-mini'), requestHash(request('array'), 'gpt-4o-mini'));
    assert.notEqual(
      requestHash(request(), 'gpt-4o-mini'),
      requestHash(
        { endpoint: 'gemini.generate', payload: { ...job(), gemini: { contents: [{ parts: [{ text: 'other' }] }] } } },
        'gpt-4o-mini',
      ),
    );
    assert.equal(streamForm(request('sse'), true), 'gemini-sse');
    assert.equal(streamForm(request('array'), true), 'gemini-array');
    assert.equal(streamForm(request(), false), undefined);
  });

  it('echoes this request’s response id and model name, in a body, SSE frames and array elements', () => {
    const target: EchoTarget = {
      endpoint: 'gemini.generate',
      payload: job('array'),
      model: 'my-alias',
      requestId: `req_${'a'.repeat(32)}`,
      jobId: 'x',
      serviceTier: 'default',
      now: 0,
    };
    const echo = cacheEcho(target);
    const chunk = (text: string) =>
      JSON.stringify({
        candidates: [{ content: { role: 'model', parts: [{ text }] }, index: 0 }],
        modelVersion: 'gpt-4o-mini',
        responseId: 'old',
      });
    const rewritten = JSON.parse(echo.body(chunk('a')));
    assert.equal(rewritten.responseId, 'a'.repeat(32));
    assert.equal(rewritten.modelVersion, 'my-alias');
    assert.equal(rewritten.candidates[0].content.parts[0].text, 'a');
    const frames = echo.sse(`data: ${chunk('a')}\n\ndata: ${chunk('b')}\n\n`);
    assert.equal(frames.split('\n\n').filter(Boolean).length, 2);
    assert.ok(
      frames
        .split('\n\n')
        .filter(Boolean)
        .every((frame) => JSON.parse(frame.slice(6)).modelVersion === 'my-alias'),
    );
    const elements = JSON.parse(`${echo.array(`[${chunk('a')},\r\n${chunk('b')}`)}]`) as Array<{
      modelVersion: string;
      responseId: string;
    }>;
    assert.deepEqual(
      elements.map((element) => element.modelVersion),
      ['my-alias', 'my-alias'],
    );
    const later = echo.array(`,\r\n${chunk('c')}`);
    assert.ok(later.startsWith(',\r\n{'));
    assert.equal(JSON.parse(later.slice(3)).responseId, 'a'.repeat(32));
    // An error element is no answer: it passes as it is.
    const error = JSON.stringify({ error: { code: 500, message: 'x', status: 'INTERNAL' } });
    assert.equal(echo.array(`,\r\n${error}]`), `,\r\n${error}]`);
  });
});
