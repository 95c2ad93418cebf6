import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import Koa from 'koa';
import { ConsoleAssets } from '../../api/console/assets.js';
import { GatewayError } from '../../shared/errors.js';

// The console's built files as the api serves them, from a build-shaped folder.
describe('console assets', () => {
  let dir: string;
  let server: Server;
  let base: string;
  const script = `console.log(${JSON.stringify('x'.repeat(4000))});`;

  function serveFrom(assets: ConsoleAssets): Koa {
    const app = new Koa();
    app.use(async (ctx, next) => {
      try {
        await next();
      } catch (error) {
        ctx.status = (error as GatewayError).status ?? 500;
        ctx.body = (error as GatewayError).toBody?.() ?? {};
      }
    });
    app.use((ctx) => assets.serve(ctx, ctx.path.replace(/^\/console\/?/, '')));
    return app;
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'console-assets-'));
    mkdirSync(join(dir, 'assets'));
    writeFileSync(
      join(dir, 'index.html'),
      '<!doctype html><html lang="en"><title>Switchyard</title><script type="module" ' +
        'src="/console/assets/index-abc123.js"></script></html>',
    );
    writeFileSync(join(dir, 'assets', 'index-abc123.js'), script);
    writeFileSync(join(dir, 'assets', 'index-abc123.js.map'), '{}');
    writeFileSync(join(dir, '.inputs-hash'), 'secret-ish');
    server = createServer(serveFrom(new ConsoleAssets(dir)).callback());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });

  after(() => {
    server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers every page path with index.html, revalidated', async () => {
    for (const path of ['/console', '/console/', '/console/keys', '/console/admin/accounts']) {
      const res = await fetch(`${base}${path}`);
      assert.equal(res.status, 200, path);
      assert.match(res.headers.get('content-type')!, /text\/html/);
      assert.equal(res.headers.get('cache-control'), 'no-cache');
      assert.match(await res.text(), /<title>Switchyard<\/title>/);
    }
  });

  it('serves hashed assets for a year, gzipped when asked, with an etag that answers 304', async () => {
    const res = await fetch(`${base}/console/assets/index-abc123.js`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    assert.match(res.headers.get('content-type')!, /javascript/);
    // fetch decodes gzip itself; the raw bytes are checked below.
    assert.equal(await res.text(), script);
    const raw = await new Promise<{ encoding: string | undefined; body: Buffer }>((resolve, reject) => {
      import('node:http').then(({ get }) =>
        get(`${base}/console/assets/index-abc123.js`, { headers: { 'accept-encoding': 'gzip' } }, (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (c: Buffer) => chunks.push(c));
          response.on('end', () =>
            resolve({ encoding: response.headers['content-encoding'], body: Buffer.concat(chunks) }),
          );
        }).on('error', reject),
      );
    });
    assert.equal(raw.encoding, 'gzip');
    assert.ok(raw.body.length < script.length / 4);
    assert.equal(gunzipSync(raw.body).toString(), script);
    const again = await fetch(`${base}/console/assets/index-abc123.js`, {
      headers: { 'if-none-match': res.headers.get('etag')! },
    });
    assert.equal(again.status, 304);
  });

  it('answers 404 for a missing asset (never HTML as script), and never serves source maps or dot files', async () => {
    for (const path of [
      '/console/assets/index-old999.js',
      '/console/assets/index-abc123.js.map',
      '/console/favicon.ico',
    ]) {
      assert.equal((await fetch(`${base}${path}`)).status, 404, path);
    }
    // Paths that are no file of the build are pages: the app answers them, no file is read.
    for (const path of [
      '/console/.inputs-hash',
      '/console/%2e%2e/package.json',
      '/console/assets/../../package.json',
    ]) {
      const res = await fetch(`${base}${path}`);
      const body = await res.text();
      assert.doesNotMatch(body, /secret-ish|"name": "switchyard"/, path);
      assert.ok(res.status === 404 || body.includes('<title>Switchyard</title>'), `${path}: ${res.status}`);
    }
  });

  it('brings a page its boot data in a meta tag no value can break out of, kept by no cache', async () => {
    const assets = new ConsoleAssets(dir);
    // Names and emails are anyone's to choose: each character HTML gives a meaning to, and some that JSON does.
    const hostile = `"'><script>alert(1)</script></head>&amp;&#34;\u2028${'x'.repeat(2000)}`;
    const boot = {
      config: { base_url: '' },
      session: { account: { id: 'acct_1', role: 'member', email: hostile, name: hostile }, csrf_token: 'token' },
      teams: { object: 'list', data: [{ name: hostile }], all_teams: null },
    };
    const app = new Koa();
    app.use((ctx) => {
      const rest = ctx.path.replace(/^\/console\/?/, '');
      if (assets.isPage(rest)) assets.servePage(ctx, boot);
      else assets.serve(ctx, rest);
    });
    const paged = createServer(app.callback());
    await new Promise<void>((resolve) => paged.listen(0, '127.0.0.1', resolve));
    try {
      const at = `http://127.0.0.1:${(paged.address() as { port: number }).port}`;
      for (const path of ['/console', '/console/keys', '/console/admin/accounts']) {
        const res = await fetch(`${at}${path}`, { headers: { 'accept-encoding': 'gzip' } });
        assert.equal(res.status, 200, path);
        assert.equal(res.headers.get('cache-control'), 'no-store', path);
        assert.equal(res.headers.get('etag'), null, path);
        const html = await res.text();
        // One meta tag, then the page as built: nothing of the values outside the attribute.
        const metas = [...html.matchAll(/<meta name="switchyard-boot" content="([^"]*)" \/>/g)];
        assert.equal(metas.length, 1, html.slice(0, 300));
        assert.equal(
          html.replace(metas[0]![0], '').replace(/\n\s*/g, ''),
          readFileSync(join(dir, 'index.html'), 'utf8'),
        );
        assert.doesNotMatch(metas[0]![1]!, /[<>"']/);
        const content = metas[0]![1]!.replace(
          /&(amp|quot|#39|lt|gt);/g,
          (_, name: string) => ({ amp: '&', quot: '"', '#39': "'", lt: '<', gt: '>' })[name]!,
        );
        assert.deepEqual(JSON.parse(content), boot);
      }
      // A file is served as it is, a missing one is still a 404.
      assert.equal(await (await fetch(`${at}/console/assets/index-abc123.js`)).text(), script);
      assert.equal((await fetch(`${at}/console/assets/index-old999.js`)).status, 404);
    } finally {
      paged.close();
    }
  });

  it('answers 503 console_not_built when nothing was built', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'console-empty-'));
    const bare = createServer(serveFrom(new ConsoleAssets(empty)).callback());
    await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
    try {
      const res = await fetch(`http://127.0.0.1:${(bare.address() as { port: number }).port}/console/keys`);
      assert.equal(res.status, 503);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'console_not_built');
    } finally {
      bare.close();
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
