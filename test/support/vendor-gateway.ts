import type { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic, type FakeAnthropicOptions } from './fake-anthropic.js';
import { startFakeGemini, type FakeGemini, type FakeGeminiOptions } from './fake-gemini.js';
import { startFakeOpenAI, type FakeOpenAI, type FakeOpenAIOptions } from './fake-openai.js';
import { freshRedis, startGateway, type GatewayProcess } from './gateway.js';

/**
 * The strict OpenAI, Anthropic and Gemini fakes, a fresh Redis database, and a gateway that sends each vendor's models
 * to its fake.
 */
export interface VendorGateway {
  openai: FakeOpenAI;
  anthropic: FakeAnthropic;
  gemini: FakeGemini;
  gateway: GatewayProcess;
  redis: Redis;
  /** The database's URL: the gateway's REDIS_URL. */
  redisUrl: string;
  /** Stops the gateway, then the fakes, then disconnects from Redis. */
  close(): Promise<void>;
}

export interface VendorGatewayOptions {
  /** The test file's own Redis database, emptied first (`freshRedis`). */
  db: number;
  /**
   * Each fake's options. An `apiKey` set here is the only key that fake accepts and the one the gateway is given for
   * that vendor.
   */
  openai?: FakeOpenAIOptions;
  anthropic?: FakeAnthropicOptions;
  gemini?: FakeGeminiOptions;
  /** The file's own gateway environment, over the vendor variables. */
  env?: Record<string, string>;
  /**
   * Runs once the fakes and the database are ready and before the gateway starts: a fake's default answers, the keys
   * the tests use.
   */
  prepare?(ready: Omit<VendorGateway, 'gateway' | 'close'>): void | Promise<void>;
}

/**
 * Starts the three vendor fakes, takes `db` fresh and starts the gateway
 * (role all) with every vendor's key and base URL pointing at its fake: the
 * set-up of the files that test the gateway against the real vendor protocols.
 * A start that fails closes whatever it had started before the error is thrown.
 */
export async function startVendorGateway(options: VendorGatewayOptions): Promise<VendorGateway> {
  // allSettled, not all: a fake still starting when another fails is closed too.
  const fakes = await Promise.allSettled([
    startFakeOpenAI(options.openai),
    startFakeAnthropic(options.anthropic),
    startFakeGemini(options.gemini),
  ]);
  let fresh: { url: string; redis: Redis } | undefined;
  let gateway: GatewayProcess | undefined;
  const close = async () => {
    await gateway?.stop();
    await Promise.all(fakes.map((fake) => fake.status === 'fulfilled' && fake.value.close()));
    fresh?.redis.disconnect();
  };
  try {
    const [openai, anthropic, gemini] = fakes;
    if (openai.status === 'rejected') throw openai.reason;
    if (anthropic.status === 'rejected') throw anthropic.reason;
    if (gemini.status === 'rejected') throw gemini.reason;
    fresh = await freshRedis(options.db);
    const ready = {
      openai: openai.value,
      anthropic: anthropic.value,
      gemini: gemini.value,
      redis: fresh.redis,
      redisUrl: fresh.url,
    };
    await options.prepare?.(ready);
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: options.openai?.apiKey ?? 'sk-openai-test',
        OPENAI_BASE_URL: ready.openai.url,
        ANTHROPIC_API_KEY: options.anthropic?.apiKey ?? 'sk-ant-test',
        ANTHROPIC_BASE_URL: ready.anthropic.url,
        GEMINI_API_KEY: options.gemini?.apiKey ?? 'gemini-test-key',
        GEMINI_BASE_URL: ready.gemini.url,
        ...options.env,
      },
    });
    return { ...ready, gateway, close };
  } catch (error) {
    await close();
    throw error;
  }
}
