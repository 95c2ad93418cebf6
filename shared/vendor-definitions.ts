/**
 * Which vendors exist, which wire protocol each speaks, and where each
 * lives by default. Data only: the configuration reads it for each vendor's
 * settings, `vendors.ts` to resolve channels.
 */
export type Protocol = 'openai' | 'anthropic' | 'gemini' | 'bfl' | 'mock';

/** How an OpenAI-compatible vendor departs from OpenAI; applied by the openai adapter. */
export interface OpenAICompatQuirks {
  /** Request fields the vendor refuses: dropped, with a warning naming them. */
  unsupportedParams?: string[];
  /** Request fields the vendor knows by another name. */
  renameParams?: Record<string, string>;
}

export interface VendorDefinition {
  name: string;
  protocol: Protocol;
  /** `<PREFIX>_API_KEY`, `<PREFIX>_BASE_URL`, `<PREFIX>_MAX_CONCURRENCY`, `<PREFIX>_RPM`. */
  envPrefix: string;
  /** OpenAI-style base URLs include the version path; Anthropic's and Gemini's do not (as their SDKs'). */
  defaultBaseUrl: string;
  /** How this OpenAI-compatible vendor differs from OpenAI, as data. */
  quirks?: OpenAICompatQuirks;
}

export const vendorDefinitions: readonly VendorDefinition[] = [
  { name: 'openai', protocol: 'openai', envPrefix: 'OPENAI', defaultBaseUrl: 'https://api.openai.com/v1' },
  { name: 'anthropic', protocol: 'anthropic', envPrefix: 'ANTHROPIC', defaultBaseUrl: 'https://api.anthropic.com' },
  {
    name: 'google',
    protocol: 'gemini',
    envPrefix: 'GEMINI',
    defaultBaseUrl: 'https://generativelanguage.googleapis.com',
  },
  {
    name: 'deepseek',
    protocol: 'openai',
    envPrefix: 'DEEPSEEK',
    defaultBaseUrl: 'https://api.deepseek.com/v1',
    quirks: {
      unsupportedParams: ['n', 'seed', 'parallel_tool_calls', 'service_tier', 'store', 'metadata'],
      renameParams: { max_completion_tokens: 'max_tokens' },
    },
  },
  {
    name: 'xai',
    protocol: 'openai',
    envPrefix: 'XAI',
    defaultBaseUrl: 'https://api.x.ai/v1',
    quirks: { unsupportedParams: ['service_tier', 'store', 'metadata'] },
  },
  { name: 'bfl', protocol: 'bfl', envPrefix: 'BFL', defaultBaseUrl: 'https://api.bfl.ai' },
  { name: 'mock', protocol: 'mock', envPrefix: 'MOCK', defaultBaseUrl: '' },
];
