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
 * Prints one line `{"openaiUrl", "anthropicUrl", "geminiUrl", "controlUrl", "pid", "keys"}`
 * (`keys`: the upstream key each fake takes) on stdout when it listens. Exits when told (SIGTERM/SIGINT) or when its parent
 * goes away (stdin closes).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startFakeAnthropic } from '../test/support/fake-anthropic.js';
import { startFakeGemini } from '../test/support/fake-gemini.js';
import { startFakeOpenAI, type FakeHandler } from '../test/support/fake-openai.js';
import { createFakeOpenAIImages } from '../test/support/fake-openai-images.js';
import { closeWithParent } from './parent-watch.js';

const soakUpstreamKeys = { openai: 'sk-soak-openai', anthropic: 'sk-ant-soak', gemini: 'gemini-soak-key' } as const;

const openai = await startFakeOpenAI({ record: false, apiKey: soakUpstreamKeys.openai });
const anthropic = await startFakeAnthropic({ apiKey: soakUpstreamKeys.anthropic });
const gemini = await startFakeGemini({ record: false, apiKey: soakUpstreamKeys.gemini });
const images = createFakeOpenAIImages({ apiKey: soakUpstreamKeys.openai });

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
      return { status: 500, json: { error: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: null } } };
    }
  }
  return images(request);
};
openai.setDefault(handler);

// The fake Anthropic records every request (it has no switch): the soak's few thousand are a few MB.
const stats = () => ({
  mode,
  openai: { requests: openaiRequests, faulted, inFlight: openai.inFlight, aborted: openai.abortedRequests },
  anthropic: { requests: anthropic.requests.length, inFlight: anthropic.inFlight, aborted: anthropic.abortedRequests },
  gemini: { inFlight: gemini.inFlight, aborted: gemini.abortedRequests },
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
    if (asked !== 'off' && asked !== 'error' && asked !== 'hang') return reply(400, { error: 'mode must be off, error or hang' });
    mode = asked;
    return reply(200, stats());
  }
  reply(404, { error: 'not found' });
}

const controlServer = createServer(control);
await new Promise<void>((resolve) => controlServer.listen(0, '127.0.0.1', resolve));

process.stdout.write(
  `${JSON.stringify({
    openaiUrl: openai.url,
    anthropicUrl: anthropic.url,
    geminiUrl: gemini.url,
    controlUrl: `http://127.0.0.1:${(controlServer.address() as AddressInfo).port}`,
    pid: process.pid,
    keys: soakUpstreamKeys,
  })}\n`,
);

closeWithParent(controlServer, () => [openai.close(), anthropic.close(), gemini.close()]);
