/**
 * Translation cost per streamed chunk, in process: each adapter's
 * `streamChatCompletion` consumes one long stream (N text deltas) from its
 * strict fake running in this process, the whole body sent in one write.
 * The whole consumption is timed (request, fake, parsing, translation,
 * nothing subtracted), wall and CPU (`process.cpuUsage()`), median of several
 * runs, rounds interleaved across protocols.
 */
import { performance } from 'node:perf_hooks';
import { pino } from 'pino';
import { Agent, request } from 'undici';
import { loadCatalog } from '../shared/catalog.js';
import { loadConfig } from '../shared/config.js';
import type { ChatCompletionRequest } from '../shared/schemas/chat.js';
import { startFakeAnthropic } from '../test/support/fake-anthropic.js';
import { startFakeGemini } from '../test/support/fake-gemini.js';
import { startFakeOpenAI } from '../test/support/fake-openai.js';
import { anthropicAdapter } from '../workers/vendors/anthropic/index.js';
import { geminiAdapter } from '../workers/vendors/gemini/index.js';
import { openaiAdapter } from '../workers/vendors/openai/index.js';
import type { CallContext, VendorAdapter } from '../workers/vendors/types.js';
import { createVendorHttp } from '../workers/vendors/vendor-http.js';
import { ChatStreamEncoder } from '../workers/answers/chat-encoder.js';
import { log as benchLog } from './stack.js';
import { systemBusyMs, waitForQuiet } from './procs.js';
import { expectedText, longStream, protocolModels, protocols, protocolVendors, type Protocol } from './long-streams.js';

export interface MicroRow {
  /** A protocol, or `transport` (the OpenAI body read with undici, no parsing: the floor). */
  name: Protocol | 'transport';
  /** Upstream body bytes of one stream. */
  bytes: number;
  /**
   * StreamEvents the adapter yielded per stream (N content chunks plus role, finish and usage); for `transport`, body
   * reads.
   */
  events: number;
  /** Medians over the measured runs, per stream and per text delta. */
  wallMs: number;
  cpuMs: number;
  wallUsPerChunk: number;
  cpuUsPerChunk: number;
  /** Fastest and slowest run, wall µs per chunk. */
  wallUsPerChunkMin: number;
  wallUsPerChunkMax: number;
  /** wallUsPerChunk ÷ OpenAI passthrough's (and the same for CPU). */
  ratioWall: number;
  ratioCpu: number;
}

export interface MicroResults {
  chunks: number;
  warmupRuns: number;
  runs: number;
  rows: MicroRow[];
  /** The machine's busy share (% of one core) in the second before the rounds. */
  before: { quiet: boolean; busyPct: number | null };
  /** CPU ms over all rounds: this process, and every other process on the machine. */
  cpuMs: { bench: number; others: number | null };
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

const request0 = (model: string) =>
  ({
    model,
    messages: [{ role: 'user', content: 'Say hello.' }],
    stream: true,
    stream_options: { include_usage: true },
  }) as ChatCompletionRequest;

export async function runMicro(options: {
  chunks: number;
  runs: number;
  warmupRuns: number;
  quietWaitMs: number;
}): Promise<MicroResults> {
  const { chunks, runs, warmupRuns } = options;
  const catalog = loadCatalog();
  const log = pino({ level: 'silent' });
  const openai = await startFakeOpenAI({ record: false });
  const anthropic = await startFakeAnthropic();
  const gemini = await startFakeGemini({ record: false });
  const floorAgent = new Agent({ keepAliveTimeout: 30_000 });
  const http = createVendorHttp(loadConfig({}));
  const bodies = Object.fromEntries(protocols.map((p) => [p, longStream(p, chunks)])) as Record<Protocol, string>;
  const expected = expectedText(chunks);

  const setups: Record<Protocol, { adapter: VendorAdapter; baseUrl: string; apiKey: string; enqueue: () => void }> = {
    openai: {
      adapter: openaiAdapter,
      baseUrl: openai.url,
      apiKey: 'sk-bench',
      enqueue: () => openai.enqueue({ sse: bodies.openai }),
    },
    anthropic: {
      adapter: anthropicAdapter,
      baseUrl: anthropic.url,
      apiKey: 'sk-ant-bench',
      enqueue: () => {
        anthropic.reset(); // drops its recorded requests too, so memory stays flat
        anthropic.enqueue({ sse: bodies.anthropic });
      },
    },
    gemini: {
      adapter: geminiAdapter,
      baseUrl: gemini.url,
      apiKey: 'gm-bench',
      enqueue: () => gemini.enqueue({ sse: bodies.gemini }),
    },
  };

  const context = (protocol: Protocol): CallContext => {
    const setup = setups[protocol];
    const id = protocolModels[protocol];
    return {
      requestId: `bench-${protocol}`,
      signal: new AbortController().signal,
      channel: { vendor: protocolVendors[protocol], baseUrl: setup.baseUrl, apiKey: setup.apiKey },
      upstreamModel: id,
      model: catalog.get(id)!,
      log,
      http,
    };
  };

  /** One timed consumption; returns wall ms, CPU ms and the number of events. */
  async function once(protocol: Protocol | 'transport'): Promise<{ wallMs: number; cpuMs: number; events: number }> {
    const target: Protocol = protocol === 'transport' ? 'openai' : protocol;
    setups[target].enqueue();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    let events = 0;
    if (protocol === 'transport') {
      const response = await request(`${openai.url}/chat/completions`, {
        method: 'POST',
        dispatcher: floorAgent,
        headers: { authorization: 'Bearer sk-bench', 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify(request0(protocolModels.openai)),
      });
      for await (const piece of response.body) events += (piece as Buffer).length > 0 ? 1 : 0;
    } else {
      // What a worker does with a stream: the adapter's events, encoded as the client's chunks.
      const encoder = new ChatStreamEncoder({
        form: 'chat.completion',
        model: protocolModels[protocol],
        includeUsage: true,
        legacyFunctions: false,
        serviceTier: 'default',
      });
      for await (const batch of setups[protocol].adapter.streamChat!(
        request0(protocolModels[protocol]),
        context(protocol),
      )) {
        if (encoder.encode(batch).count > 0) events += batch.length;
      }
    }
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    return { wallMs, cpuMs: (cpu.user + cpu.system) / 1000, events };
  }

  /** Untimed: the adapter's output is the expected text, in N content chunks, with usage. */
  async function verify(protocol: Protocol): Promise<void> {
    setups[protocol].enqueue();
    let text = '';
    let contentChunks = 0;
    let usage = false;
    const encoder = new ChatStreamEncoder({
      form: 'chat.completion',
      model: protocolModels[protocol],
      includeUsage: true,
      legacyFunctions: false,
      serviceTier: 'default',
    });
    for await (const batch of setups[protocol].adapter.streamChat!(
      request0(protocolModels[protocol]),
      context(protocol),
    )) {
      for (const frame of encoder.encode(batch).frames.split('\n\n')) {
        if (frame === '') continue;
        const chunk = JSON.parse(frame.slice(frame.indexOf('data: ') + 'data: '.length)) as {
          choices: Array<{ delta?: { content?: string } }>;
          usage?: unknown;
        };
        const content = chunk.choices[0]?.delta?.content;
        if (content) {
          text += content;
          contentChunks += 1;
        }
        if (chunk.usage) usage = true;
      }
    }
    if (text !== expected || contentChunks !== chunks || !usage) {
      throw new Error(
        `translation bench: ${protocol} adapter output is not the expected stream (${contentChunks} content ` +
          `chunks, usage ${usage})`,
      );
    }
  }

  const names: Array<Protocol | 'transport'> = ['transport', ...protocols];
  const samples = new Map(names.map((n) => [n, [] as Array<{ wallMs: number; cpuMs: number; events: number }>]));
  let quiet: { quiet: boolean; busyPct: number | null } = { quiet: false, busyPct: null };
  let benchCpuMs = 0;
  let othersCpuMs: number | null = null;
  try {
    for (const protocol of protocols) await verify(protocol);
    quiet = await waitForQuiet({ maxWaitMs: options.quietWaitMs });
    if (!quiet.quiet)
      benchLog(`  the machine did not go quiet (${quiet.busyPct?.toFixed(0)}% of a core busy): measuring anyway`);
    const cpu0 = process.cpuUsage();
    const busy0 = systemBusyMs();
    for (let round = 0; round < warmupRuns + runs; round += 1) {
      for (const name of names) {
        const sample = await once(name);
        if (round >= warmupRuns) samples.get(name)!.push(sample);
      }
    }
    const cpu = process.cpuUsage(cpu0);
    benchCpuMs = (cpu.user + cpu.system) / 1000;
    const busy1 = systemBusyMs();
    if (busy0 !== undefined && busy1 !== undefined) othersCpuMs = Math.max(0, busy1 - busy0 - benchCpuMs);
  } finally {
    await http.close();
    await floorAgent.close();
    await Promise.allSettled([openai.close(), anthropic.close(), gemini.close()]);
  }

  const rows: MicroRow[] = names.map((name) => {
    const list = samples.get(name)!;
    const perChunk = list.map((s) => (s.wallMs * 1000) / chunks);
    const wallMs = median(list.map((s) => s.wallMs));
    const cpuMs = median(list.map((s) => s.cpuMs));
    return {
      name,
      bytes: Buffer.byteLength(bodies[name === 'transport' ? 'openai' : name]),
      events: list[0]!.events,
      wallMs,
      cpuMs,
      wallUsPerChunk: (wallMs * 1000) / chunks,
      cpuUsPerChunk: (cpuMs * 1000) / chunks,
      wallUsPerChunkMin: Math.min(...perChunk),
      wallUsPerChunkMax: Math.max(...perChunk),
      ratioWall: 0,
      ratioCpu: 0,
    };
  });
  const base = rows.find((r) => r.name === 'openai')!;
  for (const row of rows) {
    row.ratioWall = row.wallUsPerChunk / base.wallUsPerChunk;
    row.ratioCpu = row.cpuUsPerChunk / base.cpuUsPerChunk;
  }
  return { chunks, warmupRuns, runs, rows, before: quiet, cpuMs: { bench: benchCpuMs, others: othersCpuMs } };
}
