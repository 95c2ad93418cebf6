/**
 * Google's embeddings answers (`:embedContent`, `:batchEmbedContents`) written
 * from a vendor's OpenAI embeddings body: what a Gemini client gets when a
 * model another vendor serves embeds its texts. A model Gemini serves answers
 * in its own words, relayed as sent (`workers/vendors/gemini/native-gemini-embeddings.ts`).
 */

/** One vector of an OpenAI embeddings body: floats, or `encoding_format: "base64"`'s float32 little-endian bytes. */
function readVector(embedding: unknown): number[] | undefined {
  if (Array.isArray(embedding))
    return embedding.every((value) => typeof value === 'number') ? (embedding as number[]) : undefined;
  if (typeof embedding !== 'string') return undefined;
  const bytes = Buffer.from(embedding, 'base64');
  const values: number[] = [];
  for (let offset = 0; offset + 4 <= bytes.length; offset += 4) values.push(bytes.readFloatLE(offset));
  return values;
}

/**
 * An OpenAI embeddings body (any vendor's `embed`) as Gemini answers it:
 * `{"embedding":{"values":[…]}}` for `embedContent`, `{"embeddings":[{"values":[…]},…]}`
 * for `batchEmbedContents`, in the order of the inputs. Undefined when the
 * body holds no vectors (the caller reports a malformed vendor answer).
 */
export function geminiEmbeddingsOf(body: string, batch: boolean): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return undefined;
  }
  const data = (parsed as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return undefined;
  const vectors: Array<{ index: number; values: number[] }> = [];
  for (const [position, item] of data.entries()) {
    const values = readVector((item as { embedding?: unknown } | null)?.embedding);
    if (values === undefined) return undefined;
    const index = (item as { index?: unknown }).index;
    vectors.push({ index: typeof index === 'number' ? index : position, values });
  }
  vectors.sort((a, b) => a.index - b.index);
  if (!batch) return vectors.length === 1 ? JSON.stringify({ embedding: { values: vectors[0]!.values } }) : undefined;
  return JSON.stringify({ embeddings: vectors.map(({ values }) => ({ values })) });
}
