import { createHash, timingSafeEqual } from 'node:crypto';
import type Koa from 'koa';
import type { Queue } from 'bullmq';
import type { Account } from '../../shared/accounts.js';
import type { Config } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import { resolveChannels } from '../../shared/vendors.js';
import type { AccountStore } from '../accounts/account-store.js';
import type { Session, SessionStore } from './sessions.js';
import { sessionCookie } from './console-session.js';
import { createRedactor, type Redactor } from './queue-dashboard-redact.js';

/*
 * The queue dashboard: bull-board (@bull-board/koa) at /admin/queues, over
 * every BullMQ queue (every shard) the api has. Who may enter: a request with
 * `Authorization: Bearer $ADMIN_TOKEN` (tools), or a console session of an
 * `admin` account (people). The console's session cookie is scoped to
 * /console, so a browser does not send it here: GET /console/queue-dashboard
 * (where it is sent) checks the session and hands the same token to a cookie
 * scoped to /admin/queues (HttpOnly, SameSite=Strict), then redirects here;
 * signing out or disabling the account ends the session, and with it both
 * cookies. Every path under /admin/queues is checked, the page, its static
 * files and its JSON API alike; nothing else of the app runs for them.
 *
 * Read-only unless QUEUE_DASHBOARD_WRITE=on: bull-board's own read-only mode
 * (no buttons) and, server-side, a 403 for every request but GET and HEAD. With
 * writes on, a cookie-authenticated change must come from the dashboard's own
 * origin, and three things stay refused: adding a job or editing a job's data
 * (a job the gateway did not build skips admission and billing, and the data
 * the dashboard shows is redacted, so saving it back would corrupt the job),
 * and retrying a completed job (the vendor would be called again for a request
 * already answered and billed once).
 *
 * What a job may show is in ./queue-dashboard-redact.ts: formatters for its
 * data, return value, name and progress, and every string of every API answer
 * (failed reasons and stack traces included) through the same redaction.
 * bull-board is loaded on first use, so an api that never serves the
 * dashboard does not pay for it at start.
 */

export const queueDashboardPath = '/admin/queues';
const maxJobsPerPage = 50;
/** Where the console sends an admin: sets the dashboard's session cookie, then redirects to the dashboard. */
export const queueDashboardEntry = '/console/queue-dashboard';

/** The console page a signed-out visit of the entry is sent to: it signs in, then comes back to itself. */
const consoleQueuesPage = '/console/admin/queues';

const contentSecurityPolicy = [
  "default-src 'self'",
  "script-src 'self'",
  // bull-board's page and components carry inline styles.
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  // The page sets <base href="/admin/queues/">.
  "base-uri 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

export interface QueueDashboardDeps {
  /** Every BullMQ queue of the api, all shards of all capabilities, as api/server.ts made them. */
  queues: readonly Queue[];
  config: Config;
  sessions: SessionStore;
  accounts: AccountStore;
}

type Entrant = { by: 'token' } | { by: 'session'; session: Session; account: Account };

const digest = (value: string) => createHash('sha256').update(value).digest();

const safeDecode = (segment: string) => {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
};

/** `{chat}` → `chat`, `{chat-1}` → `chat-1`: the hash tag is how a queue is named in Redis, not what it is. */
const displayName = (queueName: string) => queueName.replace(/^\{(.*)\}$/, '$1');

/**
 * Secrets the gateway knows, replaced wherever they appear: vendor keys, the admin token and password, storage and link
 * secrets.
 */
function knownSecrets(config: Config): string[] {
  const secrets = [config.adminToken, config.console.adminPassword, config.blobUrlSecret, config.s3?.secretAccessKey];
  for (const channels of resolveChannels(config).values()) for (const channel of channels) secrets.push(channel.apiKey);
  for (const vendor of Object.values(config.vendors)) secrets.push(...vendor.apiKeys);
  try {
    secrets.push(decodeURIComponent(new URL(config.redisUrl).password) || undefined);
  } catch {
    // not a URL: nothing to take from it
  }
  return secrets.filter((secret): secret is string => !!secret);
}

/**
 * The console's sign-in card (its auth-page and auth-card styles, by value),
 * inline: this path's CSP allows inline styles (bull-board's own need them),
 * and a page of its own here needs no console build to look like one.
 */
const pageStyle = [
  '*,*::before,*::after{box-sizing:border-box}',
  'body{margin:0;min-height:100vh;display:grid;place-items:center;padding:40px ' +
    '16px;color:#0f172a;font-size:14px;line-height:1.5;',
  "font-family:ui-sans-serif,system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,'Noto " +
    "Sans',sans-serif;-webkit-font-smoothing:antialiased;",
  'background:radial-gradient(1200px 500px at 50% -10%,#eef2ff 0%,rgba(238,242,255,0) 60%),#f8f9fb}',
  'main{width:min(400px,100%);padding:32px;background:#fff;border:1px solid #e6e8ec;border-radius:16px;',
  'box-shadow:0 1px 3px rgba(16,24,40,.06),0 1px 2px rgba(16,24,40,.04),0 12px 32px -12px rgba(16,24,40,.12)}',
  '.logo{display:flex;align-items:center;gap:10px;margin:0 0 28px;font-weight:650;font-size:16px}.logo ' +
    'svg{width:28px;height:28px;flex:none}',
  'h1{margin:0;font-size:22px;font-weight:650;line-height:1.25;letter-spacing:-.015em}',
  '.lead{margin:6px 0 24px;color:#64748b}',
  '.button{display:flex;align-items:center;justify-content:center;height:40px;padding:0 ' +
    '14px;border-radius:7px;background:#111827;color:#fff;',
  'font-weight:550;text-decoration:none;text-align:center}',
  '.button:hover{background:#1f2937}.button:focus-visible{outline:none;box-shadow:0 0 0 3px rgba(79,70,229,.35)}',
  '.foot{margin:22px 0 0;padding-top:18px;border-top:1px solid #e6e8ec;color:#64748b;text-align:center}',
  "code{font-family:ui-monospace,SFMono-Regular,'SF Mono',Menlo,Consolas,'Liberation " +
    "Mono',monospace;font-size:12.5px;white-space:nowrap}",
  '.foot a{color:#4338ca;text-decoration:none}.foot a:hover{text-decoration:underline}',
  '@media (max-width:560px){main{padding:24px 20px}}',
].join('');

/** The console's logo mark (console/src/components/shell.tsx). */
const logo =
  '<svg viewBox="0 0 32 32" aria-hidden="true"><rect width="32" height="32" rx="8" fill="#111827"/>' +
  ('<path d="M8 22h6l4-12h6" fill="none" stroke="#fff" stroke-width="2.5" stroke-linecap="round" ' +
    'stroke-linejoin="round"/>') +
  ('<path d="M8 10h6l1.5 4.5" fill="none" stroke="#34d399" stroke-width="2.5" stroke-linecap="round" ' +
    'stroke-linejoin="round"/></svg>');

/** A refusal a person reads: the console's look, what to do, and the way there. */
const page = (title: string, text: string, link: { href: string; label: string }, foot?: string) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, ` +
  `initial-scale=1">` +
  `<title>${title} · Switchyard</title><style>${pageStyle}</style></head><body><main>` +
  `<p class="logo">${logo}<span>Switchyard</span></p><h1>${title}</h1><p class="lead">${text}</p>` +
  `<a class="button" href="${link.href}">${link.label}</a>` +
  (foot ? `<p class="foot">${foot}</p>` : '') +
  `</main></body></html>`;

export function queueDashboard(deps: QueueDashboardDeps): Koa.Middleware {
  const { config, sessions, accounts } = deps;
  const expected = config.adminToken ? digest(config.adminToken) : undefined;
  const writable = config.queueDashboardWrite;
  const queueByName = new Map(deps.queues.map((queue) => [queue.name, queue]));
  let board: Promise<Koa.Middleware> | undefined;
  const loadBoard = () => {
    board ??= buildBoard(deps.queues, writable, createRedactor(knownSecrets(config))).catch((error: unknown) => {
      board = undefined;
      throw error;
    });
    return board;
  };

  /** The live session of this request's cookie and its account; a session of a disabled or deleted account is ended. */
  const loadSession = async (ctx: Koa.Context): Promise<{ session: Session; account: Account } | undefined> => {
    const session = await sessions.get(ctx.cookies.get(sessionCookie));
    if (!session) return undefined;
    const account = await accounts.get(session.accountId);
    if (!account || account.disabled) {
      await sessions.destroy(session);
      return undefined;
    }
    return { session, account };
  };

  /** A person's browser navigating to a page (not the API, not a static file) is answered in HTML. */
  const wantsPage = (ctx: Koa.Context, path: string) =>
    (ctx.method === 'GET' || ctx.method === 'HEAD') &&
    !path.startsWith(`${queueDashboardPath}/api/`) &&
    !path.startsWith(`${queueDashboardPath}/static/`) &&
    ctx.accepts('json', 'html') === 'html';

  const refuse = (ctx: Koa.Context, path: string, error: GatewayError, html: string): void => {
    if (!wantsPage(ctx, path)) throw error;
    ctx.status = error.status;
    ctx.set(error.headers);
    ctx.type = 'html';
    ctx.body = html;
  };

  /** Who this is, or undefined once a refusal was answered in HTML (JSON refusals are thrown). */
  const admit = async (ctx: Koa.Context, path: string): Promise<Entrant | undefined> => {
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
    if (bearer && expected && timingSafeEqual(digest(bearer[1]!), expected)) return { by: 'token' };
    const found = await loadSession(ctx);
    if (found?.account.role === 'admin') return { by: 'session', ...found };
    if (found) {
      refuse(
        ctx,
        path,
        new GatewayError(403, 'Only administrators may open the queue dashboard.', { code: 'admin_only' }),
        page('Administrators only', 'The queue dashboard is for administrators of this gateway.', {
          href: '/console',
          label: 'Back to the console',
        }),
      );
      return undefined;
    }
    const message = bearer
      ? 'Invalid admin token.'
      : 'The queue dashboard needs `Authorization: Bearer $ADMIN_TOKEN`, or a console session of an administrator.';
    refuse(
      ctx,
      path,
      new GatewayError(401, message, {
        code: bearer ? 'invalid_admin_token' : 'not_signed_in',
        headers: { 'www-authenticate': 'Bearer realm="switchyard admin"' },
      }),
      page(
        'Sign in to see the queues',
        'The queue dashboard is for administrators of this gateway: sign in to the console, and it opens from there.',
        // Through the console's entry: signed in already, it goes straight to the dashboard; else to the sign-in first.
        { href: queueDashboardEntry, label: 'Sign in to the console' },
        'Scripts and tools: send <code>Authorization: Bearer $ADMIN_TOKEN</code>.',
      ),
    );
    return undefined;
  };

  /** What an admitted request may not do: anything but reading when read-only; a few things always. */
  const guard = async (ctx: Koa.Context, path: string, entrant: Entrant): Promise<void> => {
    if (ctx.method === 'GET' || ctx.method === 'HEAD') return;
    if (!writable) {
      throw new GatewayError(
        403,
        'The queue dashboard is read-only: set QUEUE_DASHBOARD_WRITE=on to act on jobs and queues from it.',
        {
          code: 'queue_dashboard_read_only',
        },
      );
    }
    if (entrant.by === 'session') {
      // The cookie is SameSite=Strict already; a change must also say it comes from this origin.
      const origin = ctx.get('origin');
      let host: string | undefined;
      try {
        host = origin ? new URL(origin).host : undefined;
      } catch {
        host = undefined;
      }
      const sameOrigin = origin ? host === ctx.host : ctx.get('sec-fetch-site') === 'same-origin';
      if (!sameOrigin)
        throw new GatewayError(403, 'A change from the queue dashboard must come from its own page.', {
          code: 'csrf_failed',
        });
    }
    // The router matches case-insensitively on the decoded path: so does this.
    const segments = path.slice(queueDashboardPath.length).split('/').filter(Boolean).map(safeDecode);
    const lower = segments.map((segment) => segment.toLowerCase());
    if (lower[0] !== 'api' || lower[1] !== 'queues') return;
    const [, , queueName, second, third] = segments;
    const [, , , secondLower, thirdLower] = lower;
    if (secondLower === 'add' && third === undefined) {
      throw new GatewayError(403, 'Jobs are made by the gateway’s own endpoints; the dashboard does not add them.', {
        code: 'queue_dashboard_forbidden',
      });
    }
    if (thirdLower === 'update-data') {
      throw new GatewayError(403, 'The dashboard shows job data redacted; it does not write job data back.', {
        code: 'queue_dashboard_forbidden',
      });
    }
    const completedRetry = () =>
      new GatewayError(403, 'A completed job is not retried: its request was answered and billed already.', {
        code: 'queue_dashboard_forbidden',
      });
    if (secondLower === 'retry' && thirdLower === 'completed') throw completedRetry();
    if (thirdLower === 'retry' && queueName !== undefined && second !== undefined) {
      const queue = queueByName.get(queueName);
      if (queue && (await queue.getJobState(second)) === 'completed') throw completedRetry();
    }
  };

  /** GET /console/queue-dashboard: an admin's console session, handed to a cookie the dashboard receives. */
  const enter = async (ctx: Koa.Context): Promise<void> => {
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') {
      throw new GatewayError(405, `Method ${ctx.method} is not allowed on ${ctx.path}.`, {
        code: 'method_not_allowed',
      });
    }
    ctx.set('cache-control', 'no-store');
    const found = await loadSession(ctx);
    if (!found) {
      ctx.redirect(consoleQueuesPage);
      return;
    }
    if (found.account.role !== 'admin') {
      ctx.status = 403;
      ctx.type = 'html';
      ctx.body = page('Administrators only', 'The queue dashboard is for administrators of this gateway.', {
        href: '/console',
        label: 'Back to the console',
      });
      return;
    }
    const leftMs = found.session.created + config.console.sessionMaxSeconds * 1000 - Date.now();
    ctx.cookies.set(sessionCookie, ctx.cookies.get(sessionCookie)!, {
      httpOnly: true,
      sameSite: 'strict',
      // Koa's `secure` honours X-Forwarded-Proto only when TRUST_PROXY is on.
      secure: ctx.secure,
      path: queueDashboardPath,
      overwrite: true,
      maxAge: Math.max(1000, leftMs),
    });
    ctx.redirect(queueDashboardPath);
  };

  return async (ctx, next) => {
    const path = ctx.path;
    if (path === queueDashboardEntry) return enter(ctx);
    if (path !== queueDashboardPath && !path.startsWith(`${queueDashboardPath}/`)) return next();
    ctx.set('x-frame-options', 'DENY');
    ctx.set('x-content-type-options', 'nosniff');
    ctx.set('referrer-policy', 'same-origin');
    ctx.set('content-security-policy', contentSecurityPolicy);
    // Job data must never sit in a cache; bull-board's own static files may.
    if (!path.startsWith(`${queueDashboardPath}/static/`)) ctx.set('cache-control', 'no-store');
    const entrant = await admit(ctx, path);
    if (!entrant) return;
    await guard(ctx, path, entrant);
    // Every job shown is redacted on the api's event loop: a page holds at most 50 (bull-board allows 300).
    const perPage = Number(ctx.query.jobsPerPage);
    if (Number.isFinite(perPage) && perPage > maxJobsPerPage)
      ctx.query = { ...ctx.query, jobsPerPage: String(maxJobsPerPage) };
    const dashboard = await loadBoard();
    // Nothing runs after the dashboard: a path it does not know is a 404 (the envelope answers it).
    await dashboard(ctx, async () => {});
    // Its page asks for Google's fonts, which the policy above refuses (a console error on every load): the link
    // is left out, and the system's fonts stand in as they did.
    if (typeof ctx.body === 'string' && ctx.response.is('html'))
      ctx.body = ctx.body.replace(/<link\b[^>]*fonts\.googleapis\.com[^>]*>\s*/g, '');
  };
}

/** `chat.completions · gpt-4o-mini`: the endpoint (the job's name) and the model asked for. */
function jobName(job: { name?: unknown; data?: unknown }, redactor: Redactor): string {
  const name = typeof job.name === 'string' ? job.name : '';
  const model = job.data && typeof job.data === 'object' ? (job.data as { model?: unknown }).model : undefined;
  return redactor.text(typeof model === 'string' && model ? `${name} · ${model}` : name);
}

async function buildBoard(queues: readonly Queue[], writable: boolean, redactor: Redactor): Promise<Koa.Middleware> {
  const [{ createBullBoard }, { BullMQAdapter }, { KoaAdapter }] = await Promise.all([
    import('@bull-board/api'),
    import('@bull-board/api/bullMQAdapter'),
    import('@bull-board/koa'),
  ]);
  const serverAdapter = new KoaAdapter();
  serverAdapter.setBasePath(queueDashboardPath);
  const adapters = queues.map((queue) => {
    // bull-board hides the retry buttons of completed jobs with `allowCompletedRetries` (the guard refuses them too).
    const options = {
      readOnlyMode: !writable,
      allowRetries: writable,
      allowCompletedRetries: false,
      displayName: displayName(queue.name),
    };
    const adapter = new BullMQAdapter(queue, options);
    adapter.setFormatter('data', (data: unknown) => redactor.value(data));
    adapter.setFormatter('returnValue', (value: unknown) => redactor.returnValue(value));
    adapter.setFormatter('progress', (progress: unknown) => redactor.value(progress));
    adapter.setFormatter('name', (job: { name?: unknown; data?: unknown }) => jobName(job, redactor));
    return adapter;
  });
  createBullBoard({
    queues: adapters,
    serverAdapter,
    options: {
      uiConfig: {
        boardTitle: 'Switchyard queues',
        miscLinks: [{ text: 'Console', url: consoleQueuesPage }],
      },
      handlerHooks: {
        // What no formatter reaches (a failed job's reason and stack traces, job logs, flows, scheduler templates)
        // goes through the same redaction: every string of every answer of the dashboard's API.
        after: (_context, result) => ({ ...result, body: redactor.strings(result.body) as typeof result.body }),
      },
    },
  });
  return serverAdapter.registerPlugin() as unknown as Koa.Middleware;
}
