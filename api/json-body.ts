import type { IncomingMessage } from 'node:http';
import { GatewayError, invalidRequest } from '../shared/errors.js';

export const payloadTooLarge = (limit: number) =>
  new GatewayError(413, `Request body too large: the limit is ${limit} bytes.`, { code: 'request_too_large' });

/**
 * Reads and parses a JSON object body. A declared length over the limit is
 * refused before reading; an undeclared one is cut off as soon as it passes it.
 */
export async function readJsonObject(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  const type = req.headers['content-type'] ?? '';
  if (type && !/^application\/(?:[\w.+-]*\+)?json\b/i.test(type)) {
    throw invalidRequest(`Unsupported content type '${type.split(';')[0]}': send the body as application/json.`);
  }
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > limit) throw payloadTooLarge(limit);

  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw payloadTooLarge(limit);
    chunks.push(chunk);
  }
  const text = chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, size).toString('utf8');
  if (text.trim() === '') throw invalidRequest('The request body is empty: send a JSON object.');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw invalidRequest(
      `We could not parse the JSON body of your request (${(error as Error).message}). Send valid JSON.`,
      null,
      'invalid_json',
    );
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw invalidRequest('The request body must be a JSON object.', null, 'invalid_json');
  }
  return body as Record<string, unknown>;
}
