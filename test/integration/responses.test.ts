import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { defaultAccountId } from '../../shared/accounts.js';
import { settledKey } from '../../shared/redis-keys.js';
import {
  createKey,
  freshRedis,
  paidAccountKey,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import type { FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_ANTHROPIC_TEXT, type FakeAnthropic } from '../support/fake-anthropic.js';
import type { FakeGemini } from '../support/fake-gemini.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import { FAKE_TOOL_ARGUMENTS } from '../support/fake-openai-defaults.js';
import { waitForUsage } from '../support/record.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/** One SSE frame of a Responses stream, as sent. */
interface Frame {
  event: string | undefined;
  data: Record<string, any>;
  raw: string;
}

function parseFrames(text: string): Frame[] {
  return text
    .split('\n\n')
    .filter((raw) => raw.trim() !== '' && !raw.startsWith(':'))
    .map((raw) => {
      const lines = raw.split('\n');
      const event = lines.find((line) => line.startsWith('event: '))?.slice('event: '.length);
      const data = lines.find((line) => line.startsWith('data: '))!.slice('data: '.length);
      return { event, data: JSON.parse(data) as Record<string, any>, raw };
    });
}

/** Reads an SSE body until `stop` says so (then cuts the connection) or it ends. */
async function readSse(
  response: Response,
  stop?: (frames: Frame[]) => boolean,
  controller?: AbortController,
): Promise<Frame[]> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
    if (done) break;
    text += decoder.decode(value, { stream: true });
    const complete = text.slice(0, text.lastIndexOf('\n\n') + 2);
    if (stop && stop(parseFrames(complete))) {
      controller?.abort();
      return parseFrames(complete);
    }
  }
  return parseFrames(text);
}

function assertContiguous(frames: Frame[], from = 0): void {
  frames.forEach((frame, i) => {
    assert.equal(frame.data.sequence_number, from + i, `sequence_number of frame ${i} (${frame.event})`);
    assert.equal(frame.event, frame.data.type, 'the event: line names the data type');
  });
}

/** The mock quotes the first 200 characters back, a piece every 60 ms: a stream of about two seconds. */
const longPrompt = `${Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ')} [mock:slow:60]`;

describe('the Responses API against strict vendor fakes', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let client: OpenAI;
  let apiKey: string;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let vendorGateway: VendorGateway;
  let blobDir: string;

  before(async () => {
    blobDir = await mkdtemp(join(tmpdir(), 'sy-responses-'));
    vendorGateway = await startVendorGateway({
      db: 11,
      env: {
        MOCK_VENDOR: 'on',
        MOCK_STREAM_DELAY_MS: '20',
        BLOB_DIR: blobDir,
      },
      prepare: async (ready) => {
        ({ openai, anthropic, gemini, redis } = ready);
        apiKey = (await createKey(redis)).key;
      },
    });
    gateway = vendorGateway.gateway;
    client = gateway.client(apiKey);
  });

  after(async () => {
    await vendorGateway?.close();
    if (blobDir) await rm(blobDir, { recursive: true, force: true });
  });

  const post = (body: unknown, key = apiKey) =>
    fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const getRaw = (path: string, key = apiKey, headers: Record<string, string> = {}) =>
    fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${key}`, ...headers } });

  it('answers a plain request with a response object, retrievable afterwards', async () => {
    const response = await client.responses.create({
      model: 'gpt-4o-mini',
      input: 'Hello',
      instructions: 'Be brief.',
      metadata: { ticket: '42' },
    });
    assert.equal(response.object, 'response');
    assert.equal(response.status, 'completed');
    assert.match(response.id, /^resp_/);
    assert.equal(response.model, 'gpt-4o-mini');
    assert.equal(response.instructions, 'Be brief.');
    assert.deepEqual(response.metadata, { ticket: '42' });
    assert.ok(response.output_text.length > 0);
    const message = response.output[0]!;
    assert.equal(message.type, 'message');
    assert.ok(response.usage!.input_tokens > 0 && response.usage!.output_tokens > 0);
    assert.equal(response.usage!.input_tokens_details.cached_tokens, 0);
    assert.equal(response.usage!.output_tokens_details.reasoning_tokens, 0);
    assert.equal(response.usage!.total_tokens, response.usage!.input_tokens + response.usage!.output_tokens);
    const sent = openai.requests.at(-1)!.body as Record<string, any>;
    assert.equal(sent.messages[0].role, 'system');
    assert.deepEqual(sent.messages[1].content, [{ type: 'text', text: 'Hello' }]);
    assert.equal(sent.metadata, undefined, 'Responses-only fields stay with the gateway');
    const again = await client.responses.retrieve(response.id);
    assert.equal(again.output_text, response.output_text);
    assert.equal(again.status, 'completed');
  });

  it('streams the semantic events in order with contiguous sequence numbers, each frame with event: and data: lines', async () => {
    const raw = await post({ model: 'gpt-4o-mini', input: 'Hello', stream: true });
    assert.equal(raw.status, 200);
    assert.match(raw.headers.get('content-type') ?? '', /text\/event-stream/);
    const frames = await readSse(raw);
    assertContiguous(frames);
    const types = frames.map((f) => f.event);
    assert.deepEqual(types.slice(0, 4), [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
    ]);
    assert.deepEqual(types.slice(-4), [
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const deltas = frames
      .filter((f) => f.event === 'response.output_text.delta')
      .map((f) => f.data.delta)
      .join('');
    const done = frames.find((f) => f.event === 'response.output_text.done')!;
    assert.equal(done.data.text, deltas);
    const completed = frames.at(-1)!.data.response;
    assert.equal(completed.status, 'completed');
    assert.ok(completed.usage.output_tokens > 0);

    // The official client's own stream helper reads the same events.
    const stream = client.responses.stream({ model: 'gpt-4o-mini', input: 'Hello' });
    let text = '';
    for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
    const final = await stream.finalResponse();
    assert.equal(final.output_text, text);
  });

  it('runs a tool round trip: a function_call item, then function_call_output chained with previous_response_id', async () => {
    const tools = [
      {
        type: 'function' as const,
        name: 'get_weather',
        description: 'Weather of a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        strict: false,
      },
    ];
    const first = await client.responses.create({ model: 'gpt-4o-mini', input: 'Weather in Oslo?', tools });
    const call = first.output.find((item) => item.type === 'function_call');
    assert.ok(call && call.type === 'function_call');
    assert.equal(call.name, 'get_weather');
    assert.equal(call.arguments, FAKE_TOOL_ARGUMENTS);
    const sentTools = (openai.requests.at(-1)!.body as Record<string, any>).tools;
    assert.deepEqual(sentTools[0].function.name, 'get_weather', 'flat Responses tools become nested chat tools');

    const second = await client.responses.create({
      model: 'gpt-4o-mini',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '12°C and rain' }],
      tools,
    });
    assert.equal(second.output_text, 'Tool said: 12°C and rain');
    const messages = (openai.requests.at(-1)!.body as Record<string, any>).messages;
    assert.deepEqual(
      messages.map((m: { role: string }) => m.role),
      ['user', 'assistant', 'tool'],
    );
    assert.equal(messages[1].tool_calls[0].id, call.call_id);

    // The same round trip with the whole history sent by the client, streamed.
    const stream = client.responses.stream({
      model: 'gpt-4o-mini',
      input: [
        { role: 'user', content: 'Weather in Oslo?' },
        { type: 'function_call', call_id: call.call_id, name: 'get_weather', arguments: call.arguments },
        { type: 'function_call_output', call_id: call.call_id, output: 'sunny' },
      ],
      tools,
    });
    const final = await stream.finalResponse();
    assert.equal(final.output_text, 'Tool said: sunny');
  });

  it('streams a function call as its own output item with argument deltas', async () => {
    const raw = await post({
      model: 'gpt-4o-mini',
      input: 'Weather?',
      stream: true,
      tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false }],
    });
    const frames = await readSse(raw);
    assertContiguous(frames);
    const added = frames.find((f) => f.event === 'response.output_item.added')!;
    assert.equal(added.data.item.type, 'function_call');
    const args = frames
      .filter((f) => f.event === 'response.function_call_arguments.delta')
      .map((f) => f.data.delta)
      .join('');
    assert.equal(args, FAKE_TOOL_ARGUMENTS);
    assert.equal(
      frames.find((f) => f.event === 'response.function_call_arguments.done')!.data.arguments,
      FAKE_TOOL_ARGUMENTS,
    );
  });

  it('passes text.format json_schema and image input on in the vendor form', async () => {
    const schema = {
      type: 'object',
      properties: { answer: { type: 'string' } },
      required: ['answer'],
      additionalProperties: false,
    };
    await client.responses.create({
      model: 'gpt-4o-mini',
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'What is in the picture?' },
            { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' },
          ],
        },
      ],
      text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } },
    });
    const sent = openai.requests.at(-1)!.body as Record<string, any>;
    assert.deepEqual(sent.response_format, {
      type: 'json_schema',
      json_schema: { name: 'answer', schema, strict: true },
    });
    assert.deepEqual(sent.messages[0].content[1], {
      type: 'image_url',
      image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' },
    });
  });

  it('chains with previous_response_id across vendors: an OpenAI turn, then a Claude turn that sees it', async () => {
    const first = await client.responses.create({ model: 'gpt-4o-mini', input: 'My name is Ada.' });
    const second = await client.responses.create({
      model: 'claude-sonnet-4-5',
      previous_response_id: first.id,
      input: 'What is my name?',
    });
    assert.equal(second.status, 'completed');
    assert.equal(second.output_text, FAKE_ANTHROPIC_TEXT);
    assert.equal(second.previous_response_id, first.id);
    const sent = anthropic.requests.at(-1)!.body as { messages: Array<{ role: string; content: unknown }> };
    assert.deepEqual(
      sent.messages.map((m) => m.role),
      ['user', 'assistant', 'user'],
    );
    assert.equal(JSON.stringify(sent.messages[1]!.content).includes(first.output_text.slice(0, 10)), true);
    // And on to Gemini, streamed.
    const stream = client.responses.stream({
      model: 'gemini-2.5-flash',
      previous_response_id: second.id,
      input: 'Thanks',
    });
    const third = await stream.finalResponse();
    assert.equal(third.status, 'completed');
    const contents = (gemini.requests.at(-1)!.body as { contents: unknown[] }).contents;
    assert.equal(contents.length, 5);
  });

  it('serves Anthropic tool calls as function_call items, streamed and not', async () => {
    const tools = [
      {
        type: 'function' as const,
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
        strict: false,
      },
    ];
    const plain = await client.responses.create({ model: 'claude-sonnet-4-5', input: 'Weather?', tools });
    const call = plain.output.find((item) => item.type === 'function_call');
    assert.ok(call && call.type === 'function_call');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Oslo' });
    const frames = await readSse(await post({ model: 'claude-sonnet-4-5', input: 'Weather?', tools, stream: true }));
    assertContiguous(frames);
    assert.ok(frames.some((f) => f.event === 'response.function_call_arguments.done'));
  });

  it('lists input items, paginated, and deletes a response', async () => {
    const response = await client.responses.create({
      model: 'gpt-4o-mini',
      input: [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'two' },
        { role: 'user', content: 'three' },
      ],
    });
    const all = await client.responses.inputItems.list(response.id, { order: 'asc' });
    assert.deepEqual(
      all.data.map((item) => (item.type === 'message' ? item.role : item.type)),
      ['user', 'assistant', 'user'],
    );
    const page = await client.responses.inputItems.list(response.id, { limit: 2 });
    assert.equal(page.data.length, 2);
    assert.equal(page.has_more, true);
    const rest = await client.responses.inputItems.list(response.id, { limit: 2, after: page.data[1]!.id });
    assert.equal(rest.data.length, 1);
    assert.equal(rest.has_more, false);

    const deleted = await fetch(`${gateway.url}/v1/responses/${response.id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.deepEqual(await deleted.json(), { id: response.id, object: 'response', deleted: true });
    const gone = await getRaw(`/v1/responses/${response.id}`);
    assert.equal(gone.status, 404);
    assert.equal(((await gone.json()) as { error: { code: string } }).error.code, 'not_found');
  });

  it(
    'keeps a large input in the blob store and reads it back for retrieval, input items and chaining; delete ' +
      'removes it',
    async () => {
      const big = 'lorem ipsum '.repeat(25_000);
      const response = await client.responses.create({ model: 'gpt-4o-mini', input: big });
      const record = `sy:response:${response.id}`;
      assert.equal(await redis.hexists(record, 'input'), 0, 'not inline in Redis');
      const ref = await redis.hget(record, 'inputRef');
      assert.equal(ref, `responses/${response.id}/input.json`);
      assert.ok(existsSync(join(blobDir, ref!)));
      const items = await client.responses.inputItems.list(response.id);
      const first = items.data[0]!;
      assert.ok(first.type === 'message' && first.content[0]!.type === 'input_text' && first.content[0]!.text === big);
      const next = await client.responses.create({
        model: 'gpt-4o-mini',
        previous_response_id: response.id,
        input: 'and?',
      });
      assert.equal(next.status, 'completed');
      const sent = openai.requests.at(-1)!.body as { messages: Array<{ content: Array<{ text: string }> }> };
      assert.equal(sent.messages[0]!.content[0]!.text, big, 'the chained turn carries the large input');
      await fetch(`${gateway.url}/v1/responses/${response.id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${apiKey}` },
      });
      assert.equal(existsSync(join(blobDir, ref!)), false);
    },
  );

  it('shows a response to the key that made it only', async () => {
    const response = await client.responses.create({ model: 'gpt-4o-mini', input: 'mine' });
    const other = (await createKey(redis, 'other')).key;
    for (const [method, path] of [
      ['GET', `/v1/responses/${response.id}`],
      ['GET', `/v1/responses/${response.id}/input_items`],
      ['DELETE', `/v1/responses/${response.id}`],
      ['POST', `/v1/responses/${response.id}/cancel`],
      ['GET', `/v1/responses/${response.id}?stream=true`],
    ] as const) {
      const answer = await fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${other}` } });
      assert.equal(answer.status, 404, `${method} ${path}`);
    }
    const chained = await post({ model: 'gpt-4o-mini', previous_response_id: response.id, input: 'hi' }, other);
    assert.equal(chained.status, 404);
    assert.equal(((await chained.json()) as { error: { param: string } }).error.param, 'previous_response_id');
    assert.equal((await client.responses.retrieve(response.id)).status, 'completed', 'still there for its owner');
  });

  it(
    'serves Codex’s tools: a namespace’s functions under flat names, each call back with its namespace; web_search ' +
      'declined',
    async () => {
      // What Codex sends (store: false, include, reasoning summary, prompt_cache_key, client_metadata, developer
      // messages).
      const codex = {
        model: 'gpt-4o-mini',
        store: false,
        include: ['reasoning.encrypted_content'],
        reasoning: { summary: 'auto' },
        prompt_cache_key: 'session-1',
        client_metadata: { originator: 'codex_exec' },
        tools: [
          {
            type: 'namespace',
            name: 'multi_agent_v1',
            description: 'Agents you can start.',
            tools: [
              {
                type: 'function',
                name: 'spawn_agent',
                description: 'Start one.',
                parameters: { type: 'object', properties: { task: { type: 'string' } } },
                strict: false,
              },
            ],
          },
          {
            type: 'function',
            name: 'shell',
            parameters: { type: 'object', properties: { command: { type: 'string' } } },
            strict: false,
          },
          { type: 'web_search' },
        ],
      };
      const first = (await (
        await post({
          ...codex,
          input: [
            { type: 'message', role: 'developer', content: 'Be brief.' },
            { type: 'message', role: 'user', content: 'Start an agent.' },
          ],
        })
      ).json()) as Record<string, any>;
      assertMatchesSchema('Response', first, 'a response with a namespaced call');
      const call = first.output.find((item: { type: string }) => item.type === 'function_call');
      assert.equal(call.namespace, 'multi_agent_v1');
      assert.equal(call.name, 'spawn_agent');
      const sent = openai.requests.at(-1)!.body as Record<string, any>;
      assert.deepEqual(
        sent.tools.map((tool: { function: { name: string } }) => tool.function.name),
        ['multi_agent_v1__spawn_agent', 'shell'],
        'web_search declined, the namespace flattened',
      );
      assert.deepEqual(first.tools, codex.tools, 'the response echoes the tools as sent');

      // Streamed: the item says its namespace as it opens and as it closes; the client sends the call back (store:
      // false).
      const frames = await readSse(await post({ ...codex, stream: true, input: 'Start an agent.' }));
      assertContiguous(frames);
      for (const frame of frames) assertMatchesSchema('ResponseStreamEvent', frame.data, frame.event ?? 'frame');
      const done = frames.find((f) => f.event === 'response.output_item.done' && f.data.item.type === 'function_call')!;
      assert.deepEqual([done.data.item.namespace, done.data.item.name], ['multi_agent_v1', 'spawn_agent']);
      const back = await client.responses.create({
        ...(codex as object),
        input: [
          { role: 'user', content: 'Start an agent.' },
          {
            type: 'function_call',
            call_id: call.call_id,
            namespace: 'multi_agent_v1',
            name: 'spawn_agent',
            arguments: call.arguments,
          },
          { type: 'function_call_output', call_id: call.call_id, output: 'agent 7 started' },
        ],
      } as unknown as Parameters<typeof client.responses.create>[0]);
      assert.equal((back as { output_text: string }).output_text, 'Tool said: agent 7 started');
      const history = (openai.requests.at(-1)!.body as Record<string, any>).messages;
      assert.equal(
        history[1].tool_calls[0].function.name,
        'multi_agent_v1__spawn_agent',
        'the call goes back to the vendor under its flat name',
      );
    },
  );

  it('refuses bad input with a 4xx that names the parameter', async () => {
    const cases: Array<[unknown, number, string]> = [
      [{ model: 'gpt-4o-mini', input: [{ type: 'telepathy', text: 'x' }] }, 400, 'input[0].type'],
      [
        { model: 'gpt-4o-mini', input: [{ type: 'function_call_output', call_id: 'call_nowhere', output: 'x' }] },
        400,
        'input[0].call_id',
      ],
      [{ model: 'gpt-4o-mini', input: 'x', tools: [{ type: 'teleport' }] }, 400, 'tools[0].type'],
      [
        { model: 'gpt-4o-mini', input: 'x', tools: [{ type: 'web_search' }], tool_choice: 'required' },
        400,
        'tool_choice',
      ],
      [
        { model: 'gpt-4o-mini', previous_response_id: 'resp_0123456789abcdef0123', input: 'x' },
        404,
        'previous_response_id',
      ],
      [{ model: 'gpt-4o-mini' }, 400, 'input'],
      [{ model: 'gpt-4o-mini', input: 'x', background: true, store: false }, 400, 'store'],
      [{ model: 'text-embedding-3-small', input: 'x' }, 400, 'model'],
    ];
    for (const [body, status, param] of cases) {
      const answer = await post(body);
      const error = ((await answer.json()) as { error: { param: string; message: string; type: string } }).error;
      assert.equal(answer.status, status, `${JSON.stringify(body)}: ${error.message}`);
      assert.equal(error.param, param, JSON.stringify(body));
    }
    const web = await post({
      model: 'gpt-4o-mini',
      input: 'x',
      tools: [{ type: 'web_search' }],
      tool_choice: 'required',
    });
    assert.match(((await web.json()) as { error: { message: string } }).error.message, /web_search/);

    const done = await client.responses.create({ model: 'gpt-4o-mini', input: 'x' });
    const past = await getRaw(`/v1/responses/${done.id}?stream=true&starting_after=999`);
    assert.equal(past.status, 400);
    assert.equal(((await past.json()) as { error: { param: string } }).error.param, 'starting_after');
    const bad = await getRaw(`/v1/responses/${done.id}?stream=true&starting_after=-3`);
    assert.equal(bad.status, 400);
  });

  it('replays a stored response as its event stream, from any point', async () => {
    const done = await client.responses.create({ model: 'gpt-4o-mini', input: 'Hello' });
    const all = await readSse(await getRaw(`/v1/responses/${done.id}?stream=true`));
    assertContiguous(all);
    assert.equal(all.at(-1)!.event, 'response.completed');
    const tail = await readSse(await getRaw(`/v1/responses/${done.id}?stream=true&starting_after=2`));
    assertContiguous(tail, 3);
    assert.equal(tail.length, all.length - 3);
  });

  it('runs a background response to completion while the client polls', async () => {
    const queued = await client.responses.create({ model: 'mock-chat', input: longPrompt, background: true });
    assert.equal(queued.status, 'queued');
    assert.equal(queued.background, true);
    let polled = queued;
    const seen = new Set<string>([queued.status ?? 'none']);
    while (polled.status === 'queued' || polled.status === 'in_progress') {
      await new Promise((resolve) => setTimeout(resolve, 50));
      polled = await client.responses.retrieve(queued.id);
      seen.add(polled.status ?? 'none');
    }
    assert.equal(polled.status, 'completed');
    assert.ok(seen.has('in_progress'), 'seen running');
    assert.ok(polled.output_text.includes('word20'));
    assert.ok(polled.usage!.output_tokens > 0);
  });

  it('cancels a background response: the vendor call stops and the stored response says cancelled', async () => {
    const { data: queued, response: created } = await client.responses
      .create({ model: 'mock-chat', input: longPrompt.replace('slow:60', 'slow:200'), background: true })
      .withResponse();
    // Its money and its record are the creating request's (x-request-id); the response's id is the answer's.
    const requestId = created.headers.get('x-request-id')!;
    // Followed until its first words are out (a wait of a fixed time would race a busy machine's first token).
    const events = await client.responses.retrieve(queued.id, { stream: true });
    for await (const event of events) if (event.type === 'response.output_text.delta') break;
    const asked = Date.now();
    const cancelled = await client.responses.cancel(queued.id);
    assert.equal(cancelled.status, 'cancelled');
    const stored = await client.responses.retrieve(queued.id);
    assert.equal(stored.status, 'cancelled');
    assert.ok(stored.output_text.startsWith('Mock reply to'), 'it keeps what was produced');
    // Settled once, as cancelled, for what the vendor produced before the abort.
    await waitFor(
      async () => (await redis.exists(settledKey(defaultAccountId, requestId))) === 1,
      5000,
      'the cancelled response to be settled',
    );
    assert.ok(Date.now() - asked < 2000, 'the vendor call stopped and was settled within the cancel');
    const record = await waitForUsage(redis, (r) => r.request_id === requestId);
    assert.equal(record.answer_id, queued.id);
    assert.equal(record.status, 'cancelled');
    assert.ok(Number(record.output_tokens) > 0, `output tokens counted: ${record.output_tokens}`);
    // Cancelling it again changes nothing; a response that did not run in the background cannot be cancelled.
    assert.equal((await client.responses.cancel(queued.id)).status, 'cancelled');
    const foreground = await client.responses.create({ model: 'gpt-4o-mini', input: 'x' });
    const refused = await fetch(`${gateway.url}/v1/responses/${foreground.id}/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.equal(refused.status, 400);
  });

  it('bills a response as chat: a key that cannot pay gets 429 insufficient_quota', async () => {
    const created = await paidAccountKey(redis, 1);
    const answer = await post({ model: 'gpt-4o-mini', input: 'Hello' }, created.key);
    assert.equal(answer.status, 429);
    assert.equal(((await answer.json()) as { error: { code: string } }).error.code, 'insufficient_quota');
  });

  it(
    'resumes a chat completions stream after a dropped connection with Last-Event-ID, by request id or completion ' +
      'id',
    async () => {
      const controller = new AbortController();
      const started = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        // Asks for a resume grace: without one, closing the stream cancels it.
        headers: {
          authorization: `Bearer ${apiKey}`,
          'content-type': 'application/json',
          'x-stream-resume-grace-ms': '10000',
        },
        body: JSON.stringify({ model: 'mock-chat', stream: true, messages: [{ role: 'user', content: longPrompt }] }),
        signal: controller.signal,
      });
      const requestId = started.headers.get('x-request-id')!;
      const ids = (text: string) => [...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
      const reader = started.body!.getReader();
      let text = '';
      while (ids(text).length < 5) text += new TextDecoder().decode((await reader.read()).value);
      controller.abort();
      const firstPart = text.slice(0, text.lastIndexOf('\n\n') + 2);
      const seen = ids(firstPart);
      const completionId = /"id":"([^"]+)"/.exec(firstPart)![1]!;

      const resumed = await getRaw(`/v1/chat/completions/${requestId}/stream`, apiKey, {
        'last-event-id': String(seen.at(-1)),
      });
      assert.equal(resumed.status, 200);
      const rest = await resumed.text();
      const restIds = ids(rest);
      assert.equal(restIds[0], seen.at(-1)! + 1, 'nothing missed');
      restIds.forEach((id, i) => assert.equal(id, restIds[0]! + i));
      assert.ok(rest.endsWith('data: [DONE]\n\n'));
      const content = (frames: string) =>
        frames
          .split('\n\n')
          .filter((f) => f.includes('data: {'))
          .map(
            (f) =>
              (JSON.parse(f.slice(f.indexOf('data: ') + 6)) as { choices: Array<{ delta: { content?: string } }> })
                .choices[0]?.delta.content ?? '',
          )
          .join('');
      assert.ok((content(firstPart) + content(rest)).includes('word20'), 'the whole answer across the two connections');

      const byCompletionId = await getRaw(`/v1/chat/completions/${completionId}/stream`, apiKey, {
        'last-event-id': '0',
      });
      assert.equal(ids(await byCompletionId.text())[0], 1);
      const other = (await createKey(redis, 'stranger')).key;
      assert.equal((await getRaw(`/v1/chat/completions/${requestId}/stream`, other)).status, 404);
      assert.equal((await getRaw(`/v1/chat/completions/chatcmpl-nothing/stream`)).status, 404);
      // Another key's stream reads exactly like one that never was: the body names only the id asked for, never the
      // owner's request id.
      const foreign = await getRaw(`/v1/chat/completions/${completionId}/stream`, other);
      const foreignBody = await foreign.text();
      assert.equal(foreign.status, 404);
      assert.ok(!foreignBody.includes(requestId), foreignBody);
      const madeUp = `chatcmpl-${'x'.repeat(completionId.length - 'chatcmpl-'.length)}`;
      const unknownBody = await (await getRaw(`/v1/chat/completions/${madeUp}/stream`, other)).text();
      assert.equal(foreignBody.replace(completionId, '<id>'), unknownBody.replace(madeUp, '<id>'));
      const past = await getRaw(`/v1/chat/completions/${requestId}/stream`, apiKey, { 'last-event-id': '100000' });
      assert.equal(past.status, 400);
    },
  );

  describe('through the Vercel AI SDK with its default (Responses) OpenAI model', () => {
    const provider = () => createOpenAI({ apiKey, baseURL: `${gateway.url}/v1` });

    it('generateText', async () => {
      const result = await generateText({ model: provider()('gpt-4o-mini'), prompt: 'Hello' });
      assert.ok(result.text.length > 0);
      assert.ok((result.usage.outputTokens ?? 0) > 0);
      assert.equal(openai.requests.at(-1)!.path, '/v1/chat/completions', 'served by the chat adapter');
    });

    it('streamText', async () => {
      const result = streamText({ model: provider()('claude-sonnet-4-5'), prompt: 'Hello' });
      let text = '';
      for await (const piece of result.textStream) text += piece;
      assert.equal(text, FAKE_ANTHROPIC_TEXT);
    });

    it('tools, executed and sent back', async () => {
      const calls: unknown[] = [];
      const result = await generateText({
        model: provider()('gpt-4o-mini'),
        prompt: 'Weather in Oslo?',
        tools: {
          get_weather: tool({
            description: 'Weather of a city',
            inputSchema: jsonSchema<{ city: string }>({
              type: 'object',
              properties: { city: { type: 'string' } },
              required: ['city'],
            }),
            execute: async (input) => {
              calls.push(input);
              return 'warm';
            },
          }),
        },
        stopWhen: stepCountIs(3),
      });
      assert.deepEqual(calls, [{ city: 'Oslo' }]);
      assert.equal(result.text, 'Tool said: warm');
    });
  });
});

describe('a background Responses stream resumed through another api instance', () => {
  let redis: Redis;
  let apiKey: string;
  let first: GatewayProcess;
  let second: GatewayProcess;
  let worker: GatewayProcess;

  before(async () => {
    const fresh = await freshRedis(11);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    const env = { REDIS_URL: fresh.url, MOCK_STREAM_DELAY_MS: '20' };
    [first, second, worker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env }),
    ]);
  });

  after(async () => {
    await Promise.all([first?.stop(), second?.stop(), worker?.stop()]);
    redis?.disconnect();
  });

  it('misses and repeats no sequence_number when the first api dies mid-stream', async () => {
    const controller = new AbortController();
    const started = await fetch(`${first.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-chat', input: longPrompt, background: true, stream: true }),
      signal: controller.signal,
    });
    assert.equal(started.status, 200);
    const before = await readSse(
      started,
      (frames) => frames.filter((f) => f.event === 'response.output_text.delta').length >= 3,
      controller,
    );
    assertContiguous(before);
    const id = before[0]!.data.response.id as string;
    assert.equal(before[0]!.data.response.status, 'queued');
    await first.stop('SIGKILL');

    const last = before.at(-1)!.data.sequence_number as number;
    const resumed = await fetch(`${second.url}/v1/responses/${id}?stream=true&starting_after=${last}`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.equal(resumed.status, 200);
    const after = await readSse(resumed);
    assertContiguous(after, last + 1);
    assert.equal(after.at(-1)!.event, 'response.completed');
    const text = [...before, ...after]
      .filter((f) => f.event === 'response.output_text.delta')
      .map((f) => f.data.delta)
      .join('');
    assert.equal(text, after.at(-1)!.data.response.output_text);
    assert.ok(text.includes('word20'));

    // The official client resumes the same way.
    const client = second.client(apiKey);
    const replay = await client.responses.retrieve(id, { stream: true, starting_after: 5 });
    const numbers: number[] = [];
    for await (const event of replay) numbers.push(event.sequence_number);
    assert.equal(numbers[0], 6);
    assert.equal(numbers.at(-1), after.at(-1)!.data.sequence_number);
  });
});
