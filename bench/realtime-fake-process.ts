/**
 * The realtime section's vendor, in a process of its own: the strict fake of OpenAI's Realtime API
 * (test/support/fake-openai-realtime.ts) in echo mode, each appended frame answered at once with an output audio delta
 * of the same bytes stamped with this process's clock (so the client times each way apart), nothing recorded and
 * its own events not re-checked against the spec (the tests do that), so it costs little per frame.
 *
 *   --key=K   the bearer key it accepts (the gateway's OPENAI_API_KEY)
 *
 * Prints one line `{"url", "port", "pid"}` on stdout when it listens. Exits when told (SIGTERM/SIGINT) or when its
 * parent goes away (stdin closes).
 */
import { preloadFakeRealtimeSchemas, startFakeOpenAIRealtime } from '../test/support/fake-openai-realtime.js';
import { stopWithParent } from './parent-watch.js';

const key = process.argv.find((arg) => arg.startsWith('--key='))?.slice(6);
preloadFakeRealtimeSchemas();
const fake = await startFakeOpenAIRealtime({
  echo: true,
  echoStamp: true,
  record: false,
  checkSentEvents: false,
  ...(key ? { apiKey: key } : {}),
});
stopWithParent(() => {
  void fake.close().finally(() => process.exit(0));
});
process.stdout.write(`${JSON.stringify({ url: fake.url, port: fake.port, pid: process.pid })}\n`);
