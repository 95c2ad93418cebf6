import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { environmentSchema, environmentVariables, formatDefault, loadConfig } from '../../shared/config.js';
import type { EnvironmentVariable } from '../../shared/setting-kinds.js';
import { queueNames } from '../../shared/queues.js';

/**
 * The configuration page's table (docs/configuration.md): each row's variable names and its default cell, split like
 * the names when it is `a / b`.
 */
function configurationTable(): Array<{ line: string; names: string[]; defaults: string[] }> {
  const section = readFileSync(fileURLToPath(new URL('../../docs/configuration.md', import.meta.url)), 'utf8');
  const rows = [];
  // The variables' table is the page's first section (later sections have tables of their own).
  const variables = section.split('\n## ')[0]!;
  for (const line of variables.split('\n').filter((l) => l.startsWith('| `'))) {
    const [, nameCell = '', defaultCell = ''] = line.split('|').map((cell) => cell.trim());
    const names = [...nameCell.matchAll(/`([^`]+)`/g)].map(([, name]) => name!);
    const parts = defaultCell.split(' / ');
    rows.push({
      line,
      names,
      defaults: names.map((_, i) => (parts.length === names.length ? parts[i]! : defaultCell)),
    });
  }
  return rows;
}

const table = configurationTable();
const tableNames = table.flatMap((row) => row.names);

/** The variable of the schema a name belongs to: its own entry, or the family whose pattern it matches. */
function variableOf(name: string): EnvironmentVariable | undefined {
  return environmentVariables.find((v) => v.name === name) ?? environmentVariables.find((v) => v.pattern?.test(name));
}

/** A real name for a variable: a family's with `<VENDOR>` or `<QUEUE>` filled in. */
const instance = (variable: EnvironmentVariable) =>
  variable.name.replace('<VENDOR>', 'OPENAI').replace('<QUEUE>', 'CHAT');

/** `chat and embeddings `10000`, image `5000`` → { chat: 10000, embeddings: 10000, image: 5000 }. */
function perQueueCell(cell: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [, queues = '', value] of cell.matchAll(/([a-z ,]+?)\s*`(\d+)`/g)) {
    for (const queue of queues.match(/[a-z]+/g) ?? []) if (queue !== 'and') out[queue] = Number(value);
  }
  return out;
}

const failure = (env: Record<string, string>) => {
  try {
    loadConfig(env);
  } catch (error) {
    return (error as Error).message;
  }
  assert.fail(`loadConfig(${JSON.stringify(env)}) should have failed`);
};

describe('the configuration page (docs/configuration.md) against the schema', () => {
  it('reads a table', () => {
    assert.ok(table.length > 40, `${table.length} rows`);
  });

  it('lists every variable the schema knows, patterned ones as patterns', () => {
    const missing = environmentVariables.map((v) => v.name).filter((name) => !tableNames.includes(name));
    assert.deepEqual(missing, []);
  });

  it('lists only variables the schema knows', () => {
    const unknown = tableNames.filter((name) => variableOf(name) === undefined);
    assert.deepEqual(unknown, []);
  });

  it('prints the schema’s defaults', () => {
    const wrong: string[] = [];
    for (const row of table) {
      row.names.forEach((name, i) => {
        const variable = variableOf(name)!;
        const printed = row.defaults[i]!;
        const fallback = variable.default;
        if (fallback.kind === 'value') {
          if (!printed.startsWith(formatDefault(fallback)))
            wrong.push(`${name}: docs "${printed}", schema ${formatDefault(fallback)}`);
        } else if (fallback.kind === 'perQueue') {
          if (!isDeepStrictEqual(perQueueCell(printed), { ...fallback.value }))
            wrong.push(`${name}: docs "${printed}", schema ${formatDefault(fallback)}`);
        } else if (fallback.kind === 'unset') {
          if (printed.startsWith('`')) wrong.push(`${name}: docs "${printed}", schema unset`);
        } else {
          const known = fallback.instances?.[name];
          if (known !== undefined && printed !== `\`${known}\``)
            wrong.push(`${name}: docs "${printed}", schema \`${known}\``);
        }
      });
    }
    assert.deepEqual(wrong, []);
  });

  it('gives the built-in default of every name a derived default knows (each vendor’s base URL)', () => {
    const instances = environmentVariables.flatMap((v) =>
      v.default.kind === 'derived' ? Object.keys(v.default.instances ?? {}) : [],
    );
    assert.ok(instances.includes('OPENAI_BASE_URL'));
    assert.deepEqual(
      instances.filter((name) => !tableNames.includes(name)),
      [],
    );
  });

  it('documents defaults that are what the schema gives an unset variable', () => {
    const parsed = environmentSchema({}).parse({}) as Record<string, unknown>;
    for (const variable of environmentVariables) {
      if (variable.default.kind === 'value')
        assert.deepEqual(parsed[variable.name], variable.default.value, variable.name);
      assert.ok(
        variable.description.length > 0 && !variable.description.includes('\n'),
        `${variable.name} has a one-line description`,
      );
    }
  });
});

describe('one rule for switches', () => {
  const onWords = ['on', 'ON', 'On', 'true', 'True', 'TRUE', 'yes', 'YES', 'Yes', '1', ' on '];
  const offWords = ['off', 'OFF', 'Off', 'false', 'False', 'FALSE', 'no', 'NO', 'No', '0', ' off '];
  const parse = (variable: EnvironmentVariable, value: string) => variable.schema.safeParse(value);
  /**
   * Any setting that takes a word of a switch (a word: integers take 1 and 0) but not just any word (as text and host
   * lists do).
   */
  const switches = environmentVariables.filter(
    (variable) =>
      !parse(variable, 'maybe').success &&
      ['on', 'off', 'true', 'false', 'yes', 'no'].some((word) => parse(variable, word).success),
  );

  it('finds every switch: the on/off flags and the choices that hold on and off', () => {
    const names = switches.map((variable) => variable.name);
    for (const name of [
      'TRUST_PROXY',
      'FETCH_ALLOW_PRIVATE',
      'METRICS_PER_KEY',
      'QUEUE_DASHBOARD_WRITE',
      'CONSOLE_PUBLIC_PRICING',
      'S3_FORCE_PATH_STYLE',
      'MOCK_VENDOR',
      'WORKER_PROCESS',
      'CONSOLE_SIGNUP',
    ]) {
      assert.ok(names.includes(name), name);
    }
  });

  it('every switch takes on/off, true/false, yes/no and 1/0 in any case, each on-word alike and each off-word alike', () => {
    for (const variable of switches) {
      const on = parse(variable, 'on');
      const off = parse(variable, 'off');
      assert.ok(on.success && off.success && on.data !== off.data, `${variable.name} tells on from off`);
      for (const word of onWords) assert.deepEqual(parse(variable, word), on, `${variable.name}=${word}`);
      for (const word of offWords) assert.deepEqual(parse(variable, word), off, `${variable.name}=${word}`);
    }
    assert.equal(loadConfig({ MOCK_VENDOR: 'yes' }).mock.mode, 'on');
    assert.equal(loadConfig({ CONSOLE_SIGNUP: 'on' }).console.signup, 'open');
    assert.equal(loadConfig({ CONSOLE_SIGNUP: 'open' }).console.signup, 'open');
    assert.equal(loadConfig({ WORKER_PROCESS: 'FALSE' }).workerProcess, 'off');
    assert.equal(loadConfig({ S3_BUCKET: 'b', S3_FORCE_PATH_STYLE: 'Yes' }).s3?.forcePathStyle, true);
  });

  it('refuses anything else with one message: the setting, its values and the other words', () => {
    for (const variable of switches) {
      for (const value of ['maybe', 'enabled', '2', 'o n']) {
        assert.equal(
          failure({ [variable.name]: value }),
          `Invalid configuration: ${variable.name} must be ${variable.type} (also ${variable.type.includes('on') ? '' : 'on/off, '}true/false, yes/no or 1/0, in any case), got "${value}"`,
        );
      }
    }
    assert.equal(
      failure({ TRUST_PROXY: 'maybe' }),
      'Invalid configuration: TRUST_PROXY must be on or off (also true/false, yes/no or 1/0, in any case), got "maybe"',
    );
    assert.equal(
      failure({ CONSOLE_SIGNUP: 'maybe' }),
      'Invalid configuration: CONSOLE_SIGNUP must be off or open (also on/off, true/false, yes/no or 1/0, in any ' +
        'case), got "maybe"',
    );
  });
});

describe('loadConfig', () => {
  it('loads every default from an empty environment', () => {
    const config = loadConfig({});
    assert.equal(config.port, 8080);
    // This machine only, unless a container says otherwise (the Dockerfile and compose set 0.0.0.0).
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.shutdownGraceMs, 25_000, "below Kubernetes' 30 s default grace");
    assert.equal(config.metrics.token, undefined);
    assert.equal(config.streamResumeGraceMs, 0);
    assert.equal(config.streamResumeGraceMaxMs, 60_000);
    assert.equal(config.redisUrl, 'redis://127.0.0.1:6379');
    assert.equal(config.logLevel, 'info');
    assert.deepEqual(config.workerQueues, [...queueNames]);
    assert.equal(config.workerMcp, true);
    assert.deepEqual(config.concurrency, {
      chat: 4096,
      embeddings: 1024,
      image: 128,
      audio: 64,
      video: 256,
      realtime: 100,
    });
    assert.deepEqual(config.maxWaiting, {
      chat: 10_000,
      embeddings: 10_000,
      image: 5_000,
      audio: 1_000,
      video: 5_000,
      realtime: 1_000,
    });
    assert.deepEqual(config.deadlineMs, {
      chat: 600_000,
      embeddings: 120_000,
      image: 600_000,
      audio: 600_000,
      video: 3_600_000,
      realtime: 3_700_000,
    });
    assert.equal(config.maxBodyBytes, 52_428_800);
    assert.equal(config.trustProxy, false);
    assert.deepEqual(config.fetchAllowHosts, []);
    assert.equal(config.publicBaseUrl, undefined);
    assert.deepEqual(config.vendors, {});
    assert.equal(config.channelsFile, undefined);
    assert.deepEqual(config.mock, { mode: 'auto', billed: false, streamDelayMs: 20, videoMs: 1500 });
    assert.equal(config.rateLimitWaitMs, 20_000);
    assert.equal(config.vendorLeaseMs, 30_000);
    assert.deepEqual(config.channelCooldowns, { authMs: 300_000, failureMs: 30_000, failureThreshold: 3 });
    assert.deepEqual(config.vendorTimeouts, { connectMs: 10_000, firstByteMs: 120_000, idleMs: 120_000 });
    assert.equal(config.bflPollIntervalMs, 500);
    assert.equal(config.videoPollIntervalMs, 2000);
    assert.equal(config.s3, undefined);
  });

  it('under NODE_ENV=production: MOCK_VENDOR=auto is off, `on` stays on, and MOCK_BILLING=on is refused', () => {
    assert.equal(loadConfig({ NODE_ENV: 'production' }).mock.mode, 'off');
    assert.equal(loadConfig({ NODE_ENV: 'production', MOCK_VENDOR: 'on' }).mock.mode, 'on');
    assert.equal(loadConfig({ NODE_ENV: 'development' }).mock.mode, 'auto');
    assert.equal(loadConfig({ MOCK_BILLING: 'on' }).mock.billed, true);
    assert.throws(
      () => loadConfig({ NODE_ENV: 'production', MOCK_BILLING: 'on' }),
      /MOCK_BILLING=on is refused with NODE_ENV=production/,
    );
  });

  it('counts an empty value as unset and ignores variables it does not know', () => {
    const config = loadConfig({
      PORT: '',
      MOCK_STREAM_DELAY_MS: ' ',
      TEST_REDIS_URL: 'redis://x',
      FUZZ_SEED: 'random',
      SOMETHING_ELSE: 'x',
    });
    assert.equal(config.port, 8080);
    assert.equal(config.mock.streamDelayMs, 20);
  });

  it('picks up patterned families from the environment', () => {
    const config = loadConfig({
      OPENAI_API_KEY: 'sk-a, sk-b',
      OPENAI_BASE_URL: 'http://openai.internal/v1/',
      OPENAI_MAX_CONCURRENCY: '4',
      ACME_RPM: '60',
      PUBLIC_BASE_URL: 'https://gateway.example.com/',
      WORKER_CONCURRENCY: '8',
      WORKER_CONCURRENCY_IMAGE: '3',
      QUEUE_MAX_WAITING_AUDIO: '7',
      REQUEST_DEADLINE_MS_VIDEO: '5000',
    });
    assert.deepEqual(config.vendors, {
      OPENAI: { apiKeys: ['sk-a', 'sk-b'], baseUrl: 'http://openai.internal/v1', maxConcurrency: 4, rpm: undefined },
      ACME: { apiKeys: [], baseUrl: undefined, maxConcurrency: undefined, rpm: 60 },
    });
    assert.equal(config.publicBaseUrl, 'https://gateway.example.com', 'PUBLIC_BASE_URL is itself, not vendor PUBLIC');
    assert.deepEqual(config.concurrency, { chat: 8, embeddings: 8, image: 3, audio: 8, video: 8, realtime: 100 });
    assert.equal(config.maxWaiting.audio, 7);
    assert.equal(config.maxWaiting.chat, 10_000);
    assert.equal(config.deadlineMs.video, 5000);
  });

  it('reads S3 settings, path style following S3_ENDPOINT unless set', () => {
    assert.deepEqual(loadConfig({ S3_BUCKET: 'b', S3_ENDPOINT: 'http://minio:9000' }).s3, {
      bucket: 'b',
      region: 'us-east-1',
      endpoint: 'http://minio:9000',
      forcePathStyle: true,
      prefix: '',
    });
    assert.equal(loadConfig({ S3_BUCKET: 'b' }).s3?.forcePathStyle, false);
    assert.equal(
      loadConfig({ S3_BUCKET: 'b', S3_ENDPOINT: 'http://minio:9000', S3_FORCE_PATH_STYLE: 'false' }).s3?.forcePathStyle,
      false,
    );
  });

  it('refuses a bad value of each kind with one line naming the variable and what it must be', () => {
    assert.equal(
      failure({ MOCK_STREAM_DELAY_MS: 'abc' }),
      'Invalid configuration: MOCK_STREAM_DELAY_MS must be an integer ≥ 0, got "abc"',
    );
    const bad: Array<[kind: RegExp, values: string[]]> = [
      [/^an integer/, ['abc', '-1', '2.5']],
      [/^on or off$/, ['maybe']],
      [/^an absolute http\(s\) URL$/, ['ftp://example.com', 'not a url']],
      [/^[a-z]+(, [a-z]+)* or [a-z]+$/, ['sometimes']],
    ];
    let checked = 0;
    for (const variable of environmentVariables) {
      const values = bad.find(([kind]) => kind.test(variable.type))?.[1] ?? [];
      for (const value of values) {
        const name = instance(variable);
        const message = failure({ [name]: value });
        const note = /\b(on|off)\b/.test(variable.type)
          ? ` (also ${variable.type.includes('on') ? '' : 'on/off, '}true/false, yes/no or 1/0, in any case)`
          : '';
        assert.equal(message, `Invalid configuration: ${name} must be ${variable.type}${note}, got "${value}"`);
        assert.ok(!message.includes('\n'));
        checked += 1;
      }
    }
    assert.ok(checked > 100, `${checked} bad values`);
    assert.equal(
      failure({ PORT: '70000' }),
      'Invalid configuration: PORT must be an integer from 0 to 65535, got "70000"',
    );
    assert.equal(
      failure({ WORKER_LOCK_MS: '999' }),
      'Invalid configuration: WORKER_LOCK_MS must be an integer ≥ 1000, got "999"',
    );
    assert.equal(
      failure({ WORKER_QUEUES: 'chat,video-ish' }),
      'Invalid configuration: WORKER_QUEUES names an unknown queue "video-ish"; known: chat, embeddings, image, ' +
        'audio, video, realtime, mcp',
    );
    assert.equal(
      failure({ FETCH_ALLOW_HOSTS: 'images.internal,10.0.0.0/33' }),
      'Invalid configuration: FETCH_ALLOW_HOSTS holds "10.0.0.0/33", which is neither a host name (no port), an ' +
        'IP address nor a CIDR range',
    );
  });

  it('names every bad variable at once, on one line', () => {
    assert.equal(
      failure({ PORT: 'eighty', TRUST_PROXY: 'maybe', XAI_RPM: 'lots' }),
      'Invalid configuration: PORT must be an integer from 0 to 65535, got "eighty"; TRUST_PROXY must be on or ' +
        'off (also true/false, yes/no or 1/0, in any case), got "maybe"; XAI_RPM must be an integer ≥ 0, got "lots"',
    );
  });
});

describe('OpenID Connect settings', () => {
  const issuer = { OIDC_ISSUER: 'https://idp.example.com/realms/main', OIDC_CLIENT_ID: 'switchyard' };

  it('reads the team map, admin groups and break-glass emails', () => {
    const oidc = loadConfig({
      ...issuer,
      OIDC_TEAM_MAP: 'eng=Engineering:member, eng-leads=Engineering:OWNER,/finance=Money: Team:viewer',
      OIDC_ADMIN_GROUPS: 'Ops,ops',
      OIDC_BREAK_GLASS: 'Root@Example.com',
      OIDC_SCOPES: 'email groups',
    }).console.oidc;
    assert.deepEqual(oidc?.teamMap, [
      { group: 'eng', team: 'Engineering', role: 'member' },
      { group: 'eng-leads', team: 'Engineering', role: 'owner' },
      { group: '/finance', team: 'Money: Team', role: 'viewer' },
    ]);
    assert.deepEqual(oidc?.adminGroups, ['Ops', 'ops']);
    assert.deepEqual(oidc?.breakGlass, ['root@example.com']);
    assert.equal(oidc?.scopes, 'openid email groups');
    assert.equal(loadConfig({}).console.oidc, undefined);
  });

  it('names the bad entry of a team map', () => {
    assert.match(
      failure({ ...issuer, OIDC_TEAM_MAP: 'eng=Engineering:member,finance=Finance:auditor' }),
      /OIDC_TEAM_MAP holds "finance=Finance:auditor", which is not group=Team name:role/,
    );
    assert.match(
      failure({ ...issuer, OIDC_TEAM_MAP: 'Engineering:member' }),
      /OIDC_TEAM_MAP holds "Engineering:member"/,
    );
  });

  it('refuses settings that mean nothing without a provider, and a provider without a client id', () => {
    assert.match(failure({ OIDC_ONLY: 'on' }), /OIDC_ONLY is set without OIDC_ISSUER/);
    assert.match(
      failure({ OIDC_CLIENT_ID: 'x', OIDC_TEAM_MAP: 'a=A:member' }),
      /OIDC_CLIENT_ID, OIDC_TEAM_MAP are set without OIDC_ISSUER/,
    );
    assert.match(failure({ OIDC_ISSUER: 'https://idp.example.com' }), /OIDC_ISSUER is set without OIDC_CLIENT_ID/);
  });
});

describe('budget alerts', () => {
  it('takes ascending whole percentages and refuses anything else by name', () => {
    assert.deepEqual(loadConfig({}).alerts.thresholds, [50, 80, 100]);
    assert.deepEqual(loadConfig({ ALERT_THRESHOLDS: '25, 75,100' }).alerts.thresholds, [25, 75, 100]);
    for (const value of ['80,50', '50,50', '0,50', '50,101', '50,x', '50.5', '-5', '1e2']) {
      assert.throws(
        () => loadConfig({ ALERT_THRESHOLDS: value }),
        new RegExp(`ALERT_THRESHOLDS must be whole percentages .*got "${value.replace('.', '\\.')}"`),
        value,
      );
    }
  });

  it('refuses a webhook URL without its secret, and a short secret', () => {
    assert.throws(
      () => loadConfig({ ALERT_WEBHOOK_URL: 'https://hooks.example.com/switchyard' }),
      /ALERT_WEBHOOK_URL is set without ALERT_WEBHOOK_SECRET/,
    );
    assert.throws(
      () => loadConfig({ ALERT_WEBHOOK_URL: 'https://hooks.example.com/switchyard', ALERT_WEBHOOK_SECRET: 'short' }),
      /ALERT_WEBHOOK_SECRET must be at least 16 characters/,
    );
    assert.throws(
      () => loadConfig({ ALERT_WEBHOOK_URL: 'not a url', ALERT_WEBHOOK_SECRET: 'a-secret-of-enough-length' }),
      /ALERT_WEBHOOK_URL must be an absolute http\(s\) URL/,
    );
    const alerts = loadConfig({
      ALERT_WEBHOOK_URL: 'https://hooks.example.com/switchyard',
      ALERT_WEBHOOK_SECRET: 'a-secret-of-enough-length',
    }).alerts;
    assert.equal(alerts.webhookUrl, 'https://hooks.example.com/switchyard');
  });
});
