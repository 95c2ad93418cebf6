/**
 * The mock's speech served directly, in a process of its own: what the speech section calls "the mock vendor,
 * directly". `POST /v1/audio/speech` runs the very code the gateway's worker runs for `mock-speech`
 * (workers/vendors/mock/speech.ts: the tones, the writers, the pause of --delay-ms between chunks) and writes each
 * chunk to the socket as it comes, chunked, under the format's content type: no queue, no Redis, no api. The
 * difference between its times and the gateway's is what the gateway adds.
 *
 *   --delay-ms=N   the pause between chunks (the gateway's MOCK_STREAM_DELAY_MS; default 20)
 *
 * Prints one line `{"url", "pid"}` on stdout when it listens. Exits when told (SIGTERM/SIGINT) or when its parent
 * goes away (stdin closes).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { speechContentTypes, speechRequestSchema, type SpeechJob } from '../shared/schemas/speech.js';
import { speakMock } from '../workers/vendors/mock/speech.js';
import type { CallContext } from '../workers/vendors/types.js';
import { stopWithParent } from './parent-watch.js';

const delayMs = Number(process.argv.find((arg) => arg.startsWith('--delay-ms='))?.slice(11) ?? 20);
if (!Number.isInteger(delayMs) || delayMs < 0) throw new Error('--delay-ms must be a non-negative integer');

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    void (async () => {
      if (req.method !== 'POST' || req.url !== '/v1/audio/speech') {
        res.writeHead(404).end();
        return;
      }
      const parsed = speechRequestSchema.safeParse(JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}'));
      if (!parsed.success) {
        res
          .writeHead(400, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message: parsed.error.message } }));
        return;
      }
      const { model: _model, ...fields } = parsed.data;
      const job: SpeechJob = {
        input: fields.input,
        voice: fields.voice,
        response_format: fields.response_format,
        stream_format: 'audio',
        ...(fields.instructions ? { instructions: fields.instructions } : {}),
        ...(fields.speed !== undefined && fields.speed !== 1 ? { speed: fields.speed } : {}),
      };
      const controller = new AbortController();
      res.once('close', () => controller.abort());
      const ctx = { signal: controller.signal, http: { mock: { streamDelayMs: delayMs } } } as unknown as CallContext;
      try {
        let opened = false;
        for await (const batch of speakMock(job, ctx)) {
          if (!opened) {
            res.writeHead(200, { 'content-type': speechContentTypes[job.response_format] });
            opened = true;
          }
          for (const event of batch) if (event.type === 'audio') res.write(event.bytes);
        }
        res.end();
      } catch {
        res.destroy();
      }
    })();
  });
});

server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}`, pid: process.pid })}\n`);
});
stopWithParent(() => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
