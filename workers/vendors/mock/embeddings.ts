import { invalidRequest } from '../../../shared/errors.js';
import type { EmbeddingRequest } from '../../../shared/schemas/embeddings.js';
import { decodeTokens, encodeTextAsync } from '../../../shared/tokens.js';
import { loopSlices } from '../../../shared/loop-slices.js';
import type { CallContext } from '../types.js';
import type { EmbeddingsAnswer } from '../../answers/events.js';
import { readMockMarkers, throwIfErrorMarker } from './markers.js';
import { sleep } from '../sleep.js';

/** Matches the `mock-embedding` catalog entry. */
export const MOCK_EMBEDDING_DIMENSIONS = 256;

/** FNV-1a over token ids: a string and its own token array land on the same vector. */
function hashTokens(tokens: readonly number[]): number {
  let hash = 0x811c9dc5;
  for (const token of tokens) {
    for (let shift = 0; shift < 32; shift += 8) {
      hash ^= (token >>> shift) & 0xff;
      hash = Math.imul(hash, 0x01000193);
    }
  }
  // Mixing in the length keeps [] and [0] (and other zero-byte runs) apart.
  return (hash ^ tokens.length) >>> 0;
}

/** mulberry32: tiny, fast, and good enough to spread vectors around the sphere. */
function createRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Normal-distributed coordinates (Box-Muller) make the direction uniform on
 * the sphere; values are rounded to float32 so the float and base64 forms
 * carry exactly the same numbers.
 */
export function buildMockEmbedding(tokens: readonly number[], dimensions: number): Float32Array {
  const random = createRandom(hashTokens(tokens));
  const values = new Float64Array(dimensions);
  let squaredLength = 0;
  for (let i = 0; i < dimensions; i++) {
    const u = 1 - random(); // (0, 1]: log(0) would be infinite
    const value = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
    values[i] = value;
    squaredLength += value * value;
  }
  const length = Math.sqrt(squaredLength) || 1;
  const vector = new Float32Array(dimensions);
  for (let i = 0; i < dimensions; i++) vector[i] = (values[i] ?? 0) / length;
  return vector;
}

/** Little-endian float32, as OpenAI sends it and openai-python decodes it. */
function encodeBase64(vector: Float32Array): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i] ?? 0, i * 4);
  return bytes.toString('base64');
}

/** Every input as token ids: strings are encoded, token arrays are taken as given. */
async function readInputs(input: EmbeddingRequest['input']): Promise<{ tokens: number[]; text: string | undefined }[]> {
  if (typeof input === 'string') return [{ tokens: await encodeTextAsync(input), text: input }];
  if (input.length === 0) return [];
  if (typeof input[0] === 'number') return [{ tokens: input as number[], text: undefined }];
  const inputs: { tokens: number[]; text: string | undefined }[] = [];
  for (const item of input as Array<string | number[]>) {
    inputs.push(
      typeof item === 'string'
        ? { tokens: await encodeTextAsync(item), text: item }
        : { tokens: item, text: undefined },
    );
  }
  return inputs;
}

export async function createEmbeddings(request: EmbeddingRequest, ctx: CallContext): Promise<EmbeddingsAnswer> {
  ctx.signal.throwIfAborted();
  const inputs = await readInputs(request.input);
  const markers = readMockMarkers(inputs.flatMap((input) => (input.text === undefined ? [] : [input.text])));
  throwIfErrorMarker(markers);
  const slice = loopSlices();
  for (const input of inputs) {
    // A vendor rejects ids it does not know; so does the mock, or a bad client would pass every test here.
    if (input.text === undefined) {
      try {
        decodeTokens(input.tokens);
      } catch {
        throw invalidRequest('The input contains a token id outside the vocabulary.', 'input');
      }
    }
    await slice();
  }
  if (markers.slowMs !== undefined) await sleep(markers.slowMs, ctx.signal);

  const dimensions = request.dimensions ?? ctx.model.dimensions ?? MOCK_EMBEDDING_DIMENSIONS;
  const asBase64 = request.encoding_format === 'base64';
  // 2,048 vectors of 3,072 floats are megabytes of JSON: built item by item, yielding the event loop
  // every couple of milliseconds (with `npm start` the api shares it), to the text JSON.stringify gives.
  const items: string[] = [];
  for (const [index, input] of inputs.entries()) {
    const vector = buildMockEmbedding(input.tokens, dimensions);
    items.push(
      JSON.stringify({ object: 'embedding', index, embedding: asBase64 ? encodeBase64(vector) : Array.from(vector) }),
    );
    await slice();
    ctx.signal.throwIfAborted();
  }
  const promptTokens = inputs.reduce((sum, input) => sum + input.tokens.length, 0);
  const usage = { prompt_tokens: promptTokens, total_tokens: promptTokens };
  const body = `{"object":"list","data":[${items.join(',')}],"model":${JSON.stringify(ctx.upstreamModel)},"usage":${JSON.stringify(usage)}}`;
  return { body, usage: { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens } };
}
