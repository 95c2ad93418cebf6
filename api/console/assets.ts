import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import type { Context } from 'koa';
import { GatewayError } from '../../shared/errors.js';

/*
 * The console's built files (`npm run build` → dist/console), read once at
 * start into memory with a gzip copy each: a handful of small files, so no
 * request touches the disk and no path from a URL ever reaches the file
 * system. Hashed assets are cached for a year; index.html is revalidated,
 * and answers every page path so deep links and reloads work.
 */

const notBuilt = () =>
  new GatewayError(503, 'The console is not built: run `npm run build` (npm start does).', {
    type: 'server_error',
    code: 'console_not_built',
  });

interface Asset {
  body: Buffer;
  gzip: Buffer | undefined;
  type: string;
  etag: string;
  immutable: boolean;
}

const types: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.json': 'application/json',
  '.map': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
};

/** dist/console beside the code: found by walking up from this module to the folder holding package.json. */
export function defaultConsoleDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'dist', 'console');
}

export class ConsoleAssets {
  private readonly files = new Map<string, Asset>();

  constructor(readonly dir: string) {
    if (!existsSync(join(dir, 'index.html'))) return;
    for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
      if (!entry.isFile()) continue;
      const path = join(entry.parentPath, entry.name);
      const rel = relative(dir, path).split(sep).join('/');
      if (rel.startsWith('.') || rel.endsWith('.map')) continue;
      const body = readFileSync(path);
      const type = types[extname(rel)] ?? 'application/octet-stream';
      const compressible = /text|javascript|json|svg/.test(type) && body.length > 512;
      this.files.set(rel, {
        body,
        gzip: compressible ? gzipSync(body, { level: 9 }) : undefined,
        type,
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
        // Vite names built assets by content hash: they never change under the same name.
        immutable: rel.startsWith('assets/'),
      });
    }
  }

  get built(): boolean {
    return this.files.has('index.html');
  }

  /** Newest build time, for logs. */
  builtAt(): Date | undefined {
    return this.built ? statSync(join(this.dir, 'index.html')).mtime : undefined;
  }

  /** Whether `/console/<rest>` is a page (answered with index.html), not a built file or a missing one. */
  isPage(rest: string): boolean {
    return this.built && !this.files.has(rest) && !rest.startsWith('assets/') && !/\.[a-z0-9]+$/i.test(rest);
  }

  /**
   * Answers a page with index.html carrying `boot` (ConsoleBoot) for its script, in a `<meta name="switchyard-boot">`
   * before `</head>`: JSON in an attribute, every character HTML gives a meaning to written as an entity, so no value
   * (a team's name, an email) can end the attribute or the tag. Never kept by a cache: it is the visitor's own.
   */
  servePage(ctx: Context, boot: unknown): void {
    const index = this.files.get('index.html');
    if (!index) throw notBuilt();
    const html = index.body.toString('utf8');
    const meta = `<meta name="switchyard-boot" content="${escapeAttribute(JSON.stringify(boot))}" />`;
    // Before the head ends, else before the first script (the tag is read as the script starts).
    const head = html.lastIndexOf('</head>');
    const at = head >= 0 ? head : Math.max(0, html.indexOf('<script'));
    const body = Buffer.from(`${html.slice(0, at)}${meta}\n  ${html.slice(at)}`, 'utf8');
    ctx.set('cache-control', 'no-store');
    ctx.vary('accept-encoding');
    ctx.type = index.type;
    if (body.length > 512 && /\bgzip\b/.test(ctx.get('accept-encoding'))) {
      ctx.set('content-encoding', 'gzip');
      ctx.body = gzipSync(body);
    } else {
      ctx.body = body;
    }
  }

  /** Serves `/console/<rest>`: a built file, or index.html for any page path. */
  serve(ctx: Context, rest: string): void {
    if (!this.built) throw notBuilt();
    const asset = this.files.get(rest);
    // A missing asset is a 404 (a stale tab asking for an old hash must not get HTML as script); any other path is a
    // page.
    if (!asset && (rest.startsWith('assets/') || /\.[a-z0-9]+$/i.test(rest))) {
      throw new GatewayError(404, `No console file '${rest.slice(0, 200)}'.`, { code: 'not_found' });
    }
    const file = asset ?? this.files.get('index.html')!;
    ctx.set('cache-control', file.immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
    ctx.set('etag', file.etag);
    ctx.vary('accept-encoding');
    ctx.type = file.type;
    if (ctx.get('if-none-match') === file.etag) {
      ctx.status = 304;
      return;
    }
    if (file.gzip && /\bgzip\b/.test(ctx.get('accept-encoding'))) {
      ctx.set('content-encoding', 'gzip');
      ctx.body = file.gzip;
    } else {
      ctx.body = file.body;
    }
  }
}

const entities: Record<string, string> = { '&': '&amp;', '"': '&quot;', "'": '&#39;', '<': '&lt;', '>': '&gt;' };

/** Text as an HTML attribute's value holds it: `&`, quotes and angle brackets as entities. */
function escapeAttribute(text: string): string {
  return text.replace(/[&"'<>]/g, (char) => entities[char]!);
}
