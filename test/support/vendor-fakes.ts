import { startFakeAnthropic } from './fake-anthropic.js';
import { startFakeGemini } from './fake-gemini.js';
import { startFakeOpenAI } from './fake-openai.js';

/**
 * One strict fake per vendor protocol the chat models speak (OpenAI, and the
 * OpenAI-compatible DeepSeek and xAI each on a fake of their own; Anthropic;
 * Gemini), with the gateway environment that points every vendor at its fake.
 */
export async function startVendorFakes(): Promise<{ env: Record<string, string>; close(): Promise<void> }> {
  const [openai, deepseek, xai, anthropic, gemini] = await Promise.all([
    startFakeOpenAI(),
    startFakeOpenAI(),
    startFakeOpenAI(),
    startFakeAnthropic(),
    startFakeGemini(),
  ]);
  return {
    env: {
      OPENAI_API_KEY: 'sk-openai-test',
      OPENAI_BASE_URL: openai.url,
      DEEPSEEK_API_KEY: 'sk-deepseek-test',
      DEEPSEEK_BASE_URL: deepseek.url,
      XAI_API_KEY: 'xai-test',
      XAI_BASE_URL: xai.url,
      ANTHROPIC_API_KEY: 'sk-ant-test',
      ANTHROPIC_BASE_URL: anthropic.url,
      GEMINI_API_KEY: 'gemini-test-key',
      GEMINI_BASE_URL: gemini.url,
    },
    close: async () => {
      await Promise.all([openai, deepseek, xai, anthropic, gemini].map((fake) => fake.close()));
    },
  };
}
