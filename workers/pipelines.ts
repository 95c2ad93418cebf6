import type { Job } from 'bullmq';
import { GatewayError } from '../shared/errors.js';
import type { EndpointRequest, EndpointRow } from '../shared/endpoints.js';
import { jobIdOf, keepsAnswer, type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import type { ResponsesJob } from '../shared/responses.js';
import type { Protocol } from '../shared/vendor-definitions.js';
import { publishJobEvent, runMedia, type MediaDeps } from './media-processor.js';
import type { ReplyPublisher } from './reply-publisher.js';
import type { ResponsesRun } from './responses-run.js';
import type { Meter } from './settlement.js';
import type { TierRule } from '../shared/scheduling/index.js';
import { callText, runTextStream } from './text-pipeline.js';
import { countMessageTokens, runMessages } from './messages-run.js';
import { countGeminiTokens, embedGemini, runGemini } from './gemini-run.js';
import type { StreamedJob } from './answers/stream-run.js';
import { runSpeech } from './speech-run.js';
import type { CallContext } from './vendors/types.js';
import type { AnswerEvent } from './answers/events.js';
import type { ChatCompletionRequest } from '../shared/schemas/chat.js';
import type { McpLoopPlan } from '../shared/mcp/tool-loop.js';
import { toolLoop, type ToolLoopDeps } from './mcp/tool-loop.js';
import { defaultAccountId } from '../shared/accounts.js';
import { adapterMethod } from './vendors/registry.js';
import { countModerationTokens } from '../shared/schemas/moderations.js';

/** What a pipeline gets from the job run, once its vendor slot is held. */
export interface PipelineRun {
  job: Job<GatewayJobData, GatewayJobResult>;
  request: EndpointRequest;
  protocol: Protocol;
  ctx: CallContext;
  publisher: ReplyPublisher;
  /** Takes what the answer used, and the tier that served it, for billing. */
  produced: Meter;
  /**
   * How the tier that serves it is decided (`shared/scheduling/served-tier.ts`): said in the answer, billed by
   * settlement.
   */
  tier: TierRule;
  media: MediaDeps;
  /** The vendor's part is over: its slot is freed. */
  vendorDone(): Promise<void>;
  /**
   * The vendor's part of an answer the pipeline ends itself is over: billing starts (beside the answer's end), and the
   * slot is freed.
   */
  vendorDoneBilling(): Promise<void>;
  /**
   * Keeps the answer in the response cache (a request that opted in), billed first: a stream calls it before its end
   * goes out.
   */
  keepAnswer(): Promise<void>;
  /** The run's Responses encoder for this response, kept so a failure or a cancel ends the same response. */
  startResponses(job: ResponsesJob): ResponsesRun;
  /** What the gateway's tool loop needs (a request with MCP tools); absent where no loop can run. */
  tools?: ToolLoopDeps | undefined;
}

/**
 * The chat answer a Responses or Messages job is written from: the model's stream, or, for a request that names MCP
 * servers, the gateway's tool loop around it (workers/mcp/tool-loop.ts).
 */
function chatAnswer(
  run: PipelineRun,
  chat: ChatCompletionRequest,
  plan: McpLoopPlan | undefined,
): AsyncIterable<AnswerEvent[]> {
  const turn = (request: ChatCompletionRequest) => adapterMethod(run.protocol, 'streamChat')(request, run.ctx);
  if (!plan) return turn(chat);
  if (!run.tools) throw new GatewayError(503, 'The tool loop is not served by this worker.', { code: 'overloaded' });
  const { data } = run.job;
  return toolLoop(run.tools, {
    plan,
    vendor: run.ctx.channel.vendor,
    chat,
    turn,
    caller: { requestId: data.requestId, keyId: data.keyId, accountId: data.accountId ?? defaultAccountId },
    model: data.model,
    signal: run.ctx.signal,
    sideEffect: () => void run.produced.toolsCalled++,
    afterSettlement: (release) => run.produced.afterSettlement(release),
  });
}

/**
 * How the answer reaches its reader, for the run's finish step:
 * - `publish`: this body goes to the api, side by side with the bill;
 * - `keep`: an async job's result, kept by BullMQ once billed;
 * - `sent`: the pipeline answered itself (a stream ended) and billing began when the vendor was done.
 */
export type PipelineOutcome =
  | { answer: 'publish'; body: string }
  | { answer: 'keep'; result: GatewayJobResult }
  | { answer: 'sent'; result: GatewayJobResult };

/**
 * Whether a media answer names files by URL (images rendered as `url`, as asked or as the model's default): never
 * cached.
 */
function linksFiles(run: PipelineRun): boolean {
  const { request } = run;
  if (
    request.endpoint !== 'images.generations' &&
    request.endpoint !== 'images.edits' &&
    request.endpoint !== 'images.variations'
  )
    return false;
  return (request.payload.response_format ?? run.ctx.model.default_response_format ?? 'b64_json') === 'url';
}

/**
 * A job of a dialect's pipeline as its run takes it: a stream's vendor part ends by beginning its billing (the
 * pipeline ends the answer itself), a plain answer's by freeing the slot only (billed with the answer); the answer
 * is kept in the response cache when the request opted in and waits for it.
 */
function streamedJob<Job>(run: PipelineRun, job: Job): StreamedJob<Job> {
  const { data } = run.job;
  return {
    protocol: run.protocol,
    job,
    ctx: run.ctx,
    publisher: run.publisher,
    clientStreams: data.stream,
    produced: run.produced,
    vendorDone: data.stream ? run.vendorDoneBilling : run.vendorDone,
    keep: keepsAnswer(data),
    beforeEnd: run.keepAnswer,
  };
}

/** Async results past this size are kept in the blob store for their whole lifetime, not in Redis. */
const inlineAsyncResultBytes = 256 * 1024;

/** The worker's pipelines, by the endpoint row's `pipeline`. */
export const pipelines: Record<EndpointRow['pipeline'], (run: PipelineRun) => Promise<PipelineOutcome>> = {
  /** Chat, legacy completions, embeddings and moderations: streamed as the client's chunks, or one body. */
  async text(run) {
    const { job, protocol, request, ctx, produced, tier } = run;
    const keep = keepsAnswer(job.data);
    if (request.endpoint === 'moderations') {
      const answer = await adapterMethod(protocol, 'moderate')(request.payload, ctx);
      produced.answerId = answer.id;
      // Free at OpenAI, and reported with no usage: counted by the gateway all the same, for the log and the key's
      // tokens.
      if (answer.usage) produced.usage = answer.usage;
      else {
        const tokens = await countModerationTokens(request.payload.input);
        produced.usage = { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens };
      }
      if (keep) produced.cacheable = { body: answer.body };
      await run.vendorDone();
      return { answer: 'publish', body: answer.body };
    }
    if (job.data.stream) {
      await runTextStream(streamedJob(run, request), tier);
      return { answer: 'sent', result: {} };
    }
    const body = await callText(protocol, request, ctx, produced, tier, keep);
    await run.vendorDone();
    return { answer: 'publish', body };
  },

  /** The Responses API: the vendor is always streamed; the client gets its events, or the final object. */
  async responses(run) {
    const { request } = run;
    if (request.endpoint !== 'responses')
      throw new GatewayError(400, `${request.endpoint} is not a Responses endpoint.`);
    const { mcp } = request.payload;
    // An answer that called tools is not kept: a hit would not call them.
    const keep = keepsAnswer(run.job.data) && !mcp;
    const source = chatAnswer(run, request.payload.chat, mcp);
    const body = await run
      .startResponses(request.payload)
      .run(source, run.produced, run.vendorDoneBilling, keep ? { keep: run.keepAnswer } : undefined);
    return { answer: 'sent', result: body === undefined ? {} : { body } };
  },

  /**
   * Anthropic's Messages API: the vendor's own events relayed, or a chat adapter's written as them; or a token count.
   */
  async messages(run) {
    const { request } = run;
    if (request.endpoint === 'messages.count_tokens') {
      const body = await countMessageTokens(run.protocol, request.payload, run.ctx);
      await run.vendorDone();
      return { answer: 'publish', body };
    }
    if (request.endpoint !== 'messages') throw new GatewayError(400, `${request.endpoint} is not a Messages endpoint.`);
    const { mcp } = request.payload;
    const job = streamedJob(run, request.payload);
    const body = await runMessages(
      mcp ? { ...job, keep: false } : job,
      mcp && chatAnswer(run, request.payload.chat, mcp),
    );
    return body === undefined ? { answer: 'sent', result: {} } : { answer: 'publish', body };
  },

  /**
   * Google's Gemini API: the vendor's own chunks relayed, or a chat adapter's written as them; a token count;
   * embeddings.
   */
  async gemini(run) {
    const { request } = run;
    const keep = keepsAnswer(run.job.data);
    switch (request.endpoint) {
      case 'gemini.count_tokens': {
        const body = await countGeminiTokens(run.protocol, request.payload, run.ctx);
        await run.vendorDone();
        return { answer: 'publish', body };
      }
      case 'gemini.embed':
      case 'gemini.batch_embed': {
        const body = await embedGemini(run.protocol, request.payload, run.ctx, run.produced, keep);
        await run.vendorDone();
        return { answer: 'publish', body };
      }
      case 'gemini.generate': {
        const body = await runGemini(streamedJob(run, request.payload));
        return body === undefined ? { answer: 'sent', result: {} } : { answer: 'publish', body };
      }
      default:
        throw new GatewayError(400, `${request.endpoint} is not a Gemini endpoint.`);
    }
  },

  /**
   * Images, audio and video: held for a plain request, kept as the job's result for an async one; speech streamed as it
   * comes.
   */
  async media(run) {
    const { job, media } = run;
    const data = job.data;
    const jobId = jobIdOf(data);
    if (run.request.endpoint === 'audio.speech') {
      if (data.async)
        await publishJobEvent(media.redis, jobId, { type: 'progress', status: 'in_progress', progress: 0 });
      return runSpeech({ ...run, data }, run.request.payload);
    }
    // A video's id is its job's: the answer's id, as the request log keeps it.
    if (run.request.endpoint === 'videos') run.produced.answerId = jobId;
    if (data.async) await publishJobEvent(media.redis, jobId, { type: 'progress', status: 'in_progress', progress: 0 });
    const { body } = await runMedia(job, run.protocol, run.request, run.ctx, media, run.vendorDone, run.produced);
    if (!data.async) {
      // Kept by the response cache unless it links to files (an image's `url`): links expire, the entry would outlive
      // them.
      if (data.cache && !linksFiles(run)) run.produced.cacheable = { body };
      return { answer: 'publish', body };
    }
    const result: GatewayJobResult =
      body.length > inlineAsyncResultBytes
        ? { bodyRef: (await media.blobs.put(`results/${jobId}.json`, Buffer.from(body), 'application/json')).key }
        : { body };
    return { answer: 'keep', result };
  },
};
