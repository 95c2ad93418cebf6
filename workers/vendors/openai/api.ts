import type { VendorApi } from '../http.js';

/** OpenAI and every OpenAI-compatible API; the channel's base URL includes `/v1`. */
export const openaiApi = {
  // Local OpenAI-compatible servers (vLLM, Ollama) often run without a key.
  headers: (apiKey: string): Record<string, string> => (apiKey ? { authorization: `Bearer ${apiKey}` } : {}),
  paths: {
    chat: '/chat/completions',
    completions: '/completions',
    embeddings: '/embeddings',
    moderations: '/moderations',
    imageGenerations: '/images/generations',
    imageEdits: '/images/edits',
    imageVariations: '/images/variations',
    transcriptions: '/audio/transcriptions',
    translations: '/audio/translations',
    speech: '/audio/speech',
    videos: '/videos',
    video: (id: string) => `/videos/${encodeURIComponent(id)}`,
    videoContent: (id: string, variant: 'video' | 'thumbnail') =>
      `/videos/${encodeURIComponent(id)}/content${variant === 'video' ? '' : `?variant=${variant}`}`,
  },
} satisfies VendorApi;
