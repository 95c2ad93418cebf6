import { createServer, type IncomingHttpHeaders } from 'node:http';
import { closeServer, FakePauses, listenOnLoopback } from './fake-server.js';

/** One POST the fake webhook received: its headers, its raw body (what a signature covers) and the body parsed. */
export interface WebhookDelivery {
  headers: IncomingHttpHeaders;
  raw: string;
  body: Record<string, unknown>;
  /** What the fake answered: a status, or `hang` (it never answered). */
  answer: number | 'hang';
}

/** How the fake answers one delivery: a status, or `hang` (no answer until the caller gives up). */
export type WebhookAnswer = number | 'hang';

export interface FakeWebhook {
  url: string;
  readonly deliveries: readonly WebhookDelivery[];
  /** The answers for a team's deliveries, in order (the last one repeats); 200 for a team with none set. */
  answer(teamId: string, answers: readonly WebhookAnswer[]): void;
  close(): Promise<void>;
}

/** A receiver of alerts on loopback that answers each team's deliveries as a test scripts them. */
export async function startFakeWebhook(): Promise<FakeWebhook> {
  const deliveries: WebhookDelivery[] = [];
  const scripts = new Map<string, WebhookAnswer[]>();
  const pauses = new FakePauses();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: Record<string, unknown> = {};
      try {
        body = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        // Recorded as it came: the test sees what was sent.
      }
      const script = scripts.get(String(body.team_id)) ?? [];
      const answer = script.length > 1 ? script.shift()! : (script[0] ?? 200);
      deliveries.push({ headers: req.headers, raw, body, answer });
      if (answer === 'hang') {
        void pauses.wait(60_000).then(() => res.destroy());
        return;
      }
      res.writeHead(answer, { 'content-type': 'text/plain' }).end(answer < 300 ? 'ok' : 'no');
    });
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}/hooks/switchyard`,
    deliveries,
    answer(teamId, answers) {
      scripts.set(teamId, [...answers]);
    },
    async close() {
      pauses.close();
      await closeServer(server);
    },
  };
}
