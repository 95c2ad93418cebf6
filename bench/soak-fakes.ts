/**
 * The soak's vendors in a process of their own (bench/soak.ts): the strict test
 * fakes of OpenAI (chat, embeddings, and images through the images handler),
 * Anthropic and Gemini, as the tests run them, with a control server that puts
 * the fake OpenAI in a fault window and out of it again.
 *
 * A control server on a port of its own:
 *   POST /__fault?mode=error|hang|off  from now on, every other chat or embeddings
 *                                      request to the fake OpenAI is answered 500
 *                                      (`error`), or held with no answer (`hang`: the
 *                                      gateway's first-byte timeout ends it), or
 *                                      answered as always (`off`)
 *   GET  /__stats                      per fake: requests, inFlight, aborted; faulted: requests the window spoilt
 *
 * OpenAI's speech (`POST /v1/audio/speech`) and Realtime (`GET /v1/realtime`, WebSocket) fakes are servers of
 * their own: a front server on the OpenAI URL passes those to them and everything else to the fake OpenAI, so the
 * gateway sees one OpenAI, as it would.
 *
 * Prints one line `{"openaiUrl", "anthropicUrl", "geminiUrl", "controlUrl", "pid", "keys"}`
 * (`keys`: the upstream key each fake takes) on stdout when it listens. Exits when told (SIGTERM/SIGINT) or when its
 * parent goes away (stdin closes).
 */
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { startFakeAnthropic } from '../test/support/fake-anthropic.js';
import { startFakeGemini } from '../test/support/fake-gemini.js';
import { startFakeOpenAI, type FakeHandler } from '../test/support/fake-openai.js';
import { createFakeOpenAIImages } from '../test/support/fake-openai-images.js';
import { preloadFakeRealtimeSchemas, startFakeOpenAIRealtime } from '../test/support/fake-openai-realtime.js';
import { startFakeOpenAISpeech } from '../test/support/fake-openai-speech.js';
import { closeWithParent } from './parent-watch.js';

const soakUpstreamKeys = { openai: 'sk-soak-openai', anthropic: 'sk-ant-soak', gemini: 'gemini-soak-key' } as const;

const openai = await startFakeOpenAI({ record: false, apiKey: soakUpstreamKeys.openai });
const anthropic = await startFakeAnthropic({ apiKey: soakUpstreamKeys.anthropic });
const gemini = await startFakeGemini({ record: false, apiKey: soakUpstreamKeys.gemini });
const images = createFakeOpenAIImages({ apiKey: soakUpstreamKeys.openai });
const speech = await startFakeOpenAISpeech({ apiKey: soakUpstreamKeys.openai });
// It keeps each request and its audio: dropped every 10 s, a long run's are not held.
setInterval(() => speech.reset(), 10_000).unref();
preloadFakeRealtimeSchemas();
// Not recorded (a 20-minute run opens thousands of sessions); each sent event still checked against the spec.
const realtime = await startFakeOpenAIRealtime({ apiKey: soakUpstreamKeys.openai, record: false });

type FaultMode = 'off' | 'error' | 'hang';
let mode: FaultMode = 'off';
let openaiRequests = 0;
let faulted = 0;
let turn = 0;

const handler: FakeHandler = async (request) => {
  openaiRequests += 1;
  const path = request.path.split('?')[0] ?? '';
  if (mode !== 'off' && request.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/embeddings')) {
    turn += 1;
    if (turn % 2 === 0) {
      faulted += 1;
      if (mode === 'hang') return { hang: true };
      return {
        status: 500,
        json: {
          error: {
            message: 'The server had an error while processing your request.',
            type: 'server_error',
            param: null,
            code: null,
          },
        },
      };
    }
  }
  return images(request);
};
openai.setDefault(handler);

/** The port of a fake's `http://127.0.0.1:<port>/v1` URL. */
const portOf = (url: string) => Number(new URL(url).port);

/** One OpenAI for the gateway: speech and Realtime to their fakes, the rest to the fake OpenAI. */
const front = createServer((req, res) => {
  const target = (req.url ?? '').startsWith('/v1/audio/speech') ? speech.url : openai.url;
  const upstream = httpRequest(
    { host: '127.0.0.1', port: portOf(target), method: req.method, path: req.url, headers: req.headers },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on('error', () => res.destroy());
  res.on('close', () => upstream.destroy());
  req.pipe(upstream);
});
front.on('upgrade', (req: IncomingMessage, socket, head: Buffer) => {
  const upstream = connect(portOf(realtime.url), '127.0.0.1', () => {
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    upstream.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length) upstream.write(head);
    upstream.pipe(socket);
    socket.pipe(upstream);
  });
  const end = () => {
    upstream.destroy();
    socket.destroy();
  };
  upstream.on('error', end);
  socket.on('error', end);
  upstream.on('close', end);
  socket.on('close', end);
});
front.keepAliveTimeout = 30_000;
await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
const frontUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}/v1`;

// The fake Anthropic records every request (it has no switch): the soak's few thousand are a few MB.
const stats = () => ({
  mode,
  openai: { requests: openaiRequests, faulted, inFlight: openai.inFlight, aborted: openai.abortedRequests },
  anthropic: { requests: anthropic.requests.length, inFlight: anthropic.inFlight, aborted: anthropic.abortedRequests },
  gemini: { inFlight: gemini.inFlight, aborted: gemini.abortedRequests },
  speech: { requests: speech.requests.length },
  realtime: { opened: realtime.opened, open: realtime.openSessions, problems: realtime.problems.slice(0, 5) },
});

function control(req: IncomingMessage, res: ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://control');
  const reply = (status: number, value: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(value));
  };
  req.resume();
  if (req.method === 'GET' && url.pathname === '/__stats') return reply(200, stats());
  if (req.method === 'POST' && url.pathname === '/__fault') {
    const asked = url.searchParams.get('mode');
    if (asked !== 'off' && asked !== 'error' && asked !== 'hang')
      return reply(400, { error: 'mode must be off, error or hang' });
    mode = asked;
    return reply(200, stats());
  }
  reply(404, { error: 'not found' });
}

const controlServer = createServer(control);
await new Promise<void>((resolve) => controlServer.listen(0, '127.0.0.1', resolve));

process.stdout.write(
  `${JSON.stringify({
    openaiUrl: frontUrl,
    anthropicUrl: anthropic.url,
    geminiUrl: gemini.url,
    controlUrl: `http://127.0.0.1:${(controlServer.address() as AddressInfo).port}`,
    pid: process.pid,
    keys: soakUpstreamKeys,
  })}\n`,
);

closeWithParent(controlServer, () => [
  new Promise((resolve) => front.close(resolve)),
  openai.close(),
  anthropic.close(),
  gemini.close(),
  speech.close(),
  realtime.close(),
]);
