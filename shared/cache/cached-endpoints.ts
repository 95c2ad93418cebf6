import type { Endpoint } from '../endpoints.js';

/** The endpoints whose answers are cached: text answers, whose request says all that shapes them. */
export const cachedEndpoints: ReadonlySet<Endpoint> = new Set([
  'chat.completions',
  'completions',
  'embeddings',
  // Moderations: the same input to the same model gets the same judgement (a hit's answer has an id of its own).
  'moderations',
  'messages',
  'responses',
  'images.generations',
  'images.edits',
  'images.variations',
  'audio.transcriptions',
  'audio.translations',
  // Speech: the same text, voice, format, speed and instructions give the same audio (voice menus, read-aloud pages).
  'audio.speech',
  'gemini.generate',
  'gemini.embed',
  'gemini.batch_embed',
]);
