import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Job } from 'bullmq';
import type { GatewayJobData } from '../../shared/jobs.js';
import { tiersBilledFor } from '../../shared/money/pricing.js';
import { serviceTiers, type ServiceTier } from '../../shared/scheduling/vocabulary.js';
import { ChatStreamEncoder, encodeChatAnswer } from '../../workers/answers/chat-encoder.js';
import type { Answer, AnswerEvent } from '../../workers/answers/events.js';
import { ResponsesStreamEncoder } from '../../workers/answers/responses-encoder.js';
import { sentTier, servedTier, tierFacts, tierRule, type TierFacts } from '../../shared/scheduling/served-tier.js';

/*
 * The tier a request was served in (shared/scheduling/served-tier.ts): a vendor that
 * sells tiers says it, the gateway's queue decides it for the others; the
 * encoders say it on every chunk and in the response object.
 */

const facts = (overrides: Partial<TierFacts> = {}): TierFacts => ({
  band: 'default',
  native: false,
  contended: false,
  waitedMs: 0,
  flexMinWaitMs: 1000,
  ...overrides,
});

describe('servedTier: a vendor that sells tiers', () => {
  it('is sent the band, never auto, scale or fast', () => {
    for (const band of serviceTiers) assert.equal(sentTier(facts({ band, native: true })), band);
    for (const band of serviceTiers)
      assert.equal(sentTier(facts({ band })), undefined, 'any other vendor is sent none');
  });

  it('serves the tier its answer says: flex as flex, a priority or flex request downgraded to default as default', () => {
    assert.equal(servedTier(facts({ band: 'flex', native: true }), 'flex'), 'flex');
    assert.equal(servedTier(facts({ band: 'priority', native: true }), 'priority'), 'priority');
    assert.equal(servedTier(facts({ band: 'priority', native: true }), 'default'), 'default');
    assert.equal(servedTier(facts({ band: 'flex', native: true }), 'default'), 'default');
    assert.equal(servedTier(facts({ band: 'priority', native: true }), 'fast'), 'priority');
  });

  it('reads scale, auto and an unknown word as default, and no word as the band it was sent', () => {
    for (const said of ['scale', 'auto', 'turbo', '', 42, {}])
      assert.equal(servedTier(facts({ band: 'priority', native: true }), said), 'default', String(said));
    for (const band of serviceTiers) {
      assert.equal(servedTier(facts({ band, native: true })), band, `${band}: no answer yet`);
      assert.equal(servedTier(facts({ band, native: true }), null), band, `${band}: service_tier null`);
    }
  });

  it('never bills above the band (or default): priority said to a flex or default request is default', () => {
    assert.equal(servedTier(facts({ band: 'flex', native: true }), 'priority'), 'default');
    assert.equal(servedTier(facts({ band: 'default', native: true }), 'priority'), 'default');
    // Cheaper than asked is what it was served in.
    assert.equal(servedTier(facts({ band: 'default', native: true }), 'flex'), 'flex');
  });

  it('is decided by the vendor alone: neither the wait nor the contention counts', () => {
    assert.equal(servedTier(facts({ band: 'flex', native: true, waitedMs: 0 }), 'flex'), 'flex');
    assert.equal(servedTier(facts({ band: 'priority', native: true, contended: false }), 'priority'), 'priority');
  });
});

describe('servedTier: any other vendor', () => {
  it('serves priority only when other work waited where it was queued', () => {
    assert.equal(servedTier(facts({ band: 'priority', contended: true })), 'priority');
    assert.equal(servedTier(facts({ band: 'priority', contended: false })), 'default');
  });

  it('serves flex only when it waited SERVICE_TIER_FLEX_MIN_WAIT_MS before its first run', () => {
    assert.equal(servedTier(facts({ band: 'flex', waitedMs: 0 })), 'default');
    assert.equal(servedTier(facts({ band: 'flex', waitedMs: 999 })), 'default');
    assert.equal(servedTier(facts({ band: 'flex', waitedMs: 1000 })), 'flex');
    assert.equal(servedTier(facts({ band: 'flex', waitedMs: 60_000, flexMinWaitMs: 200 })), 'flex');
    // A batch's request is flex however soon it ran and whatever a native vendor says.
    assert.equal(servedTier(facts({ batch: true })), 'flex');
    assert.equal(servedTier(facts({ batch: true, native: true }), 'default'), 'flex');
    // Contention is no wait.
    assert.equal(servedTier(facts({ band: 'flex', contended: true })), 'default');
  });

  it('serves default as default, and ignores what the answer says', () => {
    assert.equal(servedTier(facts({ band: 'default', contended: true, waitedMs: 10_000 })), 'default');
    assert.equal(servedTier(facts({ band: 'flex' }), 'flex'), 'default');
    assert.equal(servedTier(facts({ band: 'priority' }), 'priority'), 'default');
  });

  it('never serves a tier its reservation does not cover', () => {
    const said = [undefined, null, ...serviceTiers, 'scale', 'auto', 'fast', 'x'];
    for (const band of serviceTiers)
      for (const native of [true, false])
        for (const contended of [true, false])
          for (const waitedMs of [0, 5_000])
            for (const answered of said) {
              const tier = servedTier(facts({ band, native, contended, waitedMs }), answered);
              assert.ok(
                tiersBilledFor(band).includes(tier),
                `${band} ${native} ${contended} ${waitedMs} ${String(answered)}: ${tier}`,
              );
            }
  });
});

describe('tierFacts', () => {
  const scheduling = { nativeTierVendors: ['openai'], flexMinWaitMs: 250 };
  const job = (
    data: Partial<GatewayJobData>,
    timing: { timestamp?: number; processedOn?: number; attemptsMade?: number; attemptsStarted?: number } = {},
  ) =>
    ({
      data: {
        requestId: 'r',
        replyTo: 'x',
        keyId: 'k',
        endpoint: 'chat.completions',
        model: 'm',
        stream: false,
        deadline: 0,
        ...data,
      },
      timestamp: timing.timestamp ?? 1_000,
      processedOn: timing.processedOn ?? 1_600,
      attemptsMade: timing.attemptsMade ?? 0,
      attemptsStarted: timing.attemptsStarted ?? 1,
    }) as unknown as Job<GatewayJobData>;

  it(
    'names native vendors by the channel, not the wire protocol: DeepSeek and xAI speak OpenAI but sell no tiers, ' +
      'nor does the mock standing in for OpenAI',
    () => {
      assert.equal(tierFacts(job({ serviceTier: 'flex' }), { vendor: 'openai' }, scheduling).native, true);
      for (const vendor of ['deepseek', 'xai', 'anthropic', 'google', 'mock'])
        assert.equal(tierFacts(job({}), { vendor }, scheduling).native, false, vendor);
      assert.equal(
        tierFacts(job({}), { vendor: 'openai', protocol: 'mock' }, scheduling).native,
        false,
        'the mock standing in for OpenAI',
      );
      // Listed as `mock`, the mock serves every tier as sent (to try tiers offline).
      assert.equal(
        tierFacts(
          job({}),
          { vendor: 'openai', protocol: 'mock' },
          { ...scheduling, nativeTierVendors: ['openai', 'mock'] },
        ).native,
        true,
      );
      assert.equal(
        tierFacts(job({}), { vendor: 'deepseek' }, { ...scheduling, nativeTierVendors: ['openai', 'deepseek'] }).native,
        true,
        'as configured',
      );
    },
  );

  it('takes the band, the contention and the first run’s queue wait from the job', () => {
    const first = tierFacts(job({ serviceTier: 'flex', contended: true }), { vendor: 'anthropic' }, scheduling);
    assert.deepEqual(first, { band: 'flex', native: false, contended: true, waitedMs: 600, flexMinWaitMs: 250 });
    assert.equal(tierFacts(job({}), { vendor: 'anthropic' }, scheduling).band, 'default', 'no tier: default');
    assert.equal(tierFacts(job({}), { vendor: 'anthropic' }, scheduling).contended, false);
    // A later run cannot tell when its first run began: it earns no flex for waiting.
    assert.equal(
      tierFacts(
        job({ serviceTier: 'flex' }, { attemptsMade: 1, attemptsStarted: 2, processedOn: 60_000 }),
        { vendor: 'anthropic' },
        scheduling,
      ).waitedMs,
      0,
    );
    assert.equal(
      tierFacts(
        job({ serviceTier: 'flex' }, { attemptsStarted: 2, processedOn: 60_000 }),
        { vendor: 'anthropic' },
        scheduling,
      ).waitedMs,
      0,
      'after a rate-limit wait',
    );
  });

  it('bands a legacy completion default whatever its job says (the completions API has no service_tier)', () => {
    assert.equal(
      tierFacts(job({ endpoint: 'completions', serviceTier: 'flex' }), { vendor: 'openai' }, scheduling).band,
      'default',
    );
    assert.equal(
      tierFacts(job({ endpoint: 'responses', serviceTier: 'priority' }), { vendor: 'openai' }, scheduling).band,
      'priority',
    );
  });
});

describe('the encoders say the served tier', () => {
  const start = (serviceTier?: string): AnswerEvent => ({
    type: 'start',
    id: 'chatcmpl-1',
    created: 1,
    ...(serviceTier ? { serviceTier } : {}),
  });
  const wire = (tier: string | null, fields: Record<string, unknown>) =>
    JSON.stringify({
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      service_tier: tier,
      ...fields,
    });
  const tiersOf = (frames: string) =>
    frames
      .split('\n\n')
      .filter(Boolean)
      .map((frame) => JSON.parse(frame.split('\ndata: ')[1]!).service_tier as string);

  it("a native vendor's stream: every chunk says its first chunk's tier (a later chunk's word changes nothing)", () => {
    const rule = tierRule(facts({ band: 'priority', native: true }));
    const encoder = new ChatStreamEncoder({
      form: 'chat.completion',
      model: 'm',
      includeUsage: true,
      legacyFunctions: false,
      serviceTier: rule.before,
      answeredTier: rule.answered,
    });
    assert.equal(encoder.serviceTier, 'priority', 'before the answer: the band sent');
    let frames = encoder.encode([
      start('default'),
      {
        type: 'text',
        choice: 0,
        text: 'a',
        wire: wire('default', { choices: [{ index: 0, delta: { content: 'a' } }] }),
      },
    ]).frames;
    frames += encoder.encode([
      {
        type: 'finish',
        choice: 0,
        reason: 'stop',
        wire: wire('priority', { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
      },
    ]).frames;
    assert.deepEqual(tiersOf(frames), ['default', 'default']);
    assert.equal(encoder.serviceTier, 'default');
  });

  it("the gateway's tier for any other vendor, whatever its chunks say", () => {
    const rule = tierRule(facts({ band: 'flex', waitedMs: 0 }));
    const encoder = new ChatStreamEncoder({
      form: 'chat.completion',
      model: 'm',
      includeUsage: true,
      legacyFunctions: false,
      serviceTier: rule.before,
      answeredTier: rule.answered,
    });
    const frames = encoder.encode([
      start('flex'),
      { type: 'role', choice: 0 },
      { type: 'text', choice: 0, text: 'hi' },
      { type: 'finish', choice: 0, reason: 'stop' },
    ]).frames;
    assert.deepEqual(tiersOf(frames), ['default', 'default', 'default']);
  });

  it("a native vendor's plain body: the tier it says", () => {
    const rule = tierRule(facts({ band: 'flex', native: true }));
    const answer: Answer = {
      id: 'c',
      created: 1,
      choices: [{ index: 0, text: 'hi', toolCalls: [], finishReason: 'stop' }],
      serviceTier: 'flex',
      wire: '{"id":"c","object":"chat.completion","service_tier":"flex","choices":[]}',
    };
    const options = {
      form: 'chat.completion',
      model: 'm',
      legacyFunctions: false,
      serviceTier: rule.before,
      answeredTier: rule.answered,
    } as const;
    assert.equal(JSON.parse(encodeChatAnswer(answer, options)).service_tier, 'flex');
    assert.equal(JSON.parse(encodeChatAnswer({ ...answer, serviceTier: 'default' }, options)).service_tier, 'default');
    assert.equal(
      JSON.parse(encodeChatAnswer({ ...answer, wire: undefined, serviceTier: 'scale' }, options)).service_tier,
      'default',
    );
  });

  it('the Responses object, from its first event on', () => {
    const shell = {
      id: 'resp_1',
      created_at: 1,
      model: 'm',
      instructions: null,
      previous_response_id: null,
      tools: [],
      tool_choice: 'auto',
      parallel_tool_calls: true,
      temperature: null,
      top_p: null,
      max_output_tokens: null,
      text: { format: { type: 'text' } },
      reasoning: { effort: null, summary: null },
      metadata: {},
      store: false,
      background: false,
      user: null,
      service_tier: 'flex' as ServiceTier,
    };
    const native = tierRule(facts({ band: 'flex', native: true }));
    const encoder = new ResponsesStreamEncoder(shell, { serviceTier: native.before, answeredTier: native.answered });
    const frames =
      encoder.encode([
        start('default'),
        { type: 'text', choice: 0, text: 'hi' },
        { type: 'finish', choice: 0, reason: 'stop' },
      ]).frames + encoder.end().frames;
    const responses = frames
      .split('\n\n')
      .filter(Boolean)
      .map((frame) => JSON.parse(frame.split('\ndata: ')[1]!))
      .filter((data) => data.response)
      .map((data) => data.response.service_tier);
    assert.deepEqual(responses, ['default', 'default', 'default'], 'created, in_progress, completed');
    assert.equal(encoder.current().service_tier, 'default');
    const gateway = tierRule(facts({ band: 'flex', waitedMs: 5_000 }));
    const other = new ResponsesStreamEncoder(shell, { serviceTier: gateway.before, answeredTier: gateway.answered });
    other.encode([start('default')]);
    assert.equal(other.current().service_tier, 'flex', 'it waited: flex');
    assert.equal(
      new ResponsesStreamEncoder(shell).current().service_tier,
      'flex',
      'no rule (no channel yet): the band asked',
    );
  });
});
