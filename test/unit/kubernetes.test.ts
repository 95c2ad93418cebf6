import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import Koa from 'koa';
import ts from 'typescript';
import { parse, parseAllDocuments } from 'yaml';
import { probeRoutes } from '../../api/http/readiness.js';
import { LoopStallMonitor } from '../../api/http/loop-stall.js';
import { apiMetrics } from '../../api/http/metrics.js';
import { environmentVariables, loadConfig, type Config } from '../../shared/config.js';
import { createLogger } from '../../shared/logger.js';
import { readinessPingTimeoutMs, startMetricsListener } from '../../shared/metrics-process.js';
import { workerCapabilities, type QueueName, type WorkerCapability } from '../../shared/queues.js';

/** What a worker Deployment serves: its one capability (`mcp` for the MCP servers' tool calls). */
const capabilityOf = (config: Config): WorkerCapability =>
  config.workerMcp && config.workerQueues.length === 0
    ? 'mcp'
    : config.workerQueues.length === 1 && !config.workerMcp
      ? config.workerQueues[0]!
      : (config.workerQueues.join(',') as never);
import { depthStates, sumDepths, type QueueDepth } from '../../shared/scheduling/backpressure.js';
import { closeMarginMs } from '../../shared/stop-deadline.js';
import { finalStage } from '../support/dockerfile.js';
import { waitFor } from '../support/gateway.js';
import { startPrivateRedis, type PrivateRedis } from '../support/redis-server.js';

/**
 * deploy/kubernetes, checked without a cluster: every overlay rendered with `kubectl kustomize`, each
 * object validated against the Kubernetes and KEDA schemas (kubernetes-models, @kubernetes-models/keda:
 * their JSON schemas, and their TypeScript interfaces for fields the schemas let through), then read
 * against the gateway's own code: each container's environment through the config check
 * (`loadConfig`), each probe against the routes that serve it, each scaler's query against what the
 * api's /metrics serves, each drain against SHUTDOWN_GRACE_MS. Nothing here was applied to a cluster.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));
const read = (path: string) => readFileSync(`${root}${path}`, 'utf8');
const overlaysDir = `${root}deploy/kubernetes/overlays`;

interface Probe {
  httpGet?: { path: string; port: number | string };
  exec?: { command: string[] };
  periodSeconds?: number;
  timeoutSeconds?: number;
  failureThreshold?: number;
}
interface KeyRef {
  name: string;
  key: string;
  optional?: boolean;
}
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: KeyRef; configMapKeyRef?: KeyRef };
}
interface SecurityContext {
  runAsNonRoot?: boolean;
  runAsUser?: number;
  readOnlyRootFilesystem?: boolean;
  allowPrivilegeEscalation?: boolean;
  capabilities?: { drop?: string[] };
  seccompProfile?: { type: string };
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  ports?: Array<{ name?: string; containerPort: number }>;
  env?: EnvVar[];
  envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }>;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  startupProbe?: Probe;
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  lifecycle?: { preStop?: { sleep?: { seconds: number } } };
  volumeMounts?: Array<{ name: string; mountPath: string }>;
  securityContext?: SecurityContext;
}
interface PodSpec {
  containers: Container[];
  volumes?: Array<{
    name: string;
    persistentVolumeClaim?: { claimName: string };
    secret?: { secretName: string; items?: Array<{ key: string; path: string }> };
    configMap?: { name: string };
  }>;
  automountServiceAccountToken?: boolean;
  enableServiceLinks?: boolean;
  terminationGracePeriodSeconds?: number;
  securityContext?: SecurityContext;
}
interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
}
interface Workload extends K8sObject {
  spec: {
    replicas?: number;
    selector: { matchLabels: Record<string, string> };
    template: { metadata: { labels: Record<string, string> }; spec: PodSpec };
  };
}
interface ScaledObject extends K8sObject {
  spec: {
    scaleTargetRef: { name: string; kind?: string };
    minReplicaCount: number;
    maxReplicaCount: number;
    advanced?: {
      horizontalPodAutoscalerConfig?: { behavior?: { scaleDown?: { stabilizationWindowSeconds?: number } } };
    };
    triggers: Array<{ type: string; metricType?: string; metadata: Record<string, string> }>;
  };
}
interface ServiceObject extends K8sObject {
  spec: {
    selector: Record<string, string>;
    clusterIP?: string;
    ports: Array<{ name?: string; port: number; targetPort?: number | string }>;
  };
}

// ---------------------------------------------------------------------------------------------
// Rendering

/** Each overlay and the Redis it runs on: an overlay added here must say which. */
const redisOf: Record<string, 'single' | 'sentinel' | 'cluster'> = {
  production: 'single',
  'production-sentinel': 'sentinel',
  'production-cluster': 'cluster',
  'in-cluster': 'single',
};
const overlays = readdirSync(overlaysDir, { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name)
  .sort();

const renders = new Map<string, K8sObject[]>();
/** `kubectl kustomize` of one overlay, as the objects it prints. */
function rendered(overlay: string): K8sObject[] {
  const done = renders.get(overlay);
  if (done) return done;
  const run = spawnSync('kubectl', ['kustomize', `${overlaysDir}/${overlay}`], { encoding: 'utf8', timeout: 60_000 });
  if (run.error) {
    assert.fail(
      `kubectl could not be run (${(run.error as NodeJS.ErrnoException).code ?? run.error.message}): these tests ` +
        `render the manifests with \`kubectl kustomize\`; \`node bin/test-setup.mjs\` says how to install it`,
    );
  }
  assert.equal(run.status, 0, `kubectl kustomize overlays/${overlay} failed: ${run.stderr}`);
  const objects = parseAllDocuments(run.stdout).map((doc) => doc.toJS() as K8sObject);
  // kustomize folds a long Secret value's base64 over lines; the API server's decoder skips the line breaks.
  for (const secret of objects.filter((o) => o.kind === 'Secret')) {
    for (const [key, value] of Object.entries(secret.data ?? {})) secret.data![key] = value.replace(/\s+/g, '');
  }
  renders.set(overlay, objects);
  return objects;
}

const ofKind = <T extends K8sObject>(objects: K8sObject[], kind: string) =>
  objects.filter((o) => o.kind === kind) as T[];
const workloads = (objects: K8sObject[]) =>
  objects.filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet') as Workload[];
/** The Deployments that run the gateway (the image's `node dist/bin/start.js`). */
const gateways = (objects: K8sObject[]) =>
  ofKind<Workload>(objects, 'Deployment').filter((d) =>
    d.spec.template.spec.containers[0]?.command?.includes('dist/bin/start.js'),
  );
const roleOf = (w: Workload) =>
  /^--role=(\w+)$/.exec(
    w.spec.template.spec.containers[0]?.command?.find((arg) => arg.startsWith('--role=')) ?? '',
  )?.[1];
const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([key, value]) => labels[key] === value);

// ---------------------------------------------------------------------------------------------
// The environment each container gets

/** The Secret an operator makes for the production overlays, from deploy/kubernetes/switchyard.env.example. */
const example = read('deploy/kubernetes/switchyard.env.example');
const operatorSecret = /create secret generic (\S+) --from-env-file=/.exec(example)?.[1] ?? '';

/** A value of the kind each secret variable holds, for the names the example leaves empty. */
function plausible(name: string): string | undefined {
  if (/_API_KEY$/.test(name)) return `sk-test-${name.toLowerCase()}`;
  const values: Record<string, string> = {
    METRICS_TOKEN: 'f'.repeat(64),
    ADMIN_TOKEN: 'a'.repeat(48),
    OIDC_CLIENT_ID: 'switchyard',
    OIDC_CLIENT_SECRET: 'oidc-client-secret',
    S3_ACCESS_KEY_ID: 'AKIAEXAMPLEEXAMPLE00',
    S3_SECRET_ACCESS_KEY: 's3-secret-access-key-example',
    BLOB_URL_SECRET: 'b'.repeat(64),
    SECRETS_KEY: 'k'.repeat(44),
    PGPASSWORD: `p@ss:w/rd?#`,
  };
  return values[name];
}

/** Every `NAME=` line of the example, commented out or not, each with its value or a plausible one: all set at once. */
function exampleSecret(): Record<string, string> {
  const entries = [...example.matchAll(/^#?\s*([A-Z][A-Z0-9_]*)=(.*)$/gm)].map(
    ([, name, value]) => [name!, value!.trim()] as const,
  );
  assert.ok(entries.length > 10, "switchyard.env.example lists the Secret's variables");
  const secret: Record<string, string> = {};
  for (const [name, value] of entries) {
    const filled = value || plausible(name);
    assert.ok(filled, `switchyard.env.example: ${name} has no value, and this test knows no plausible one for it`);
    secret[name] = filled;
  }
  return secret;
}

/**
 * What a ConfigMap or Secret of the render holds, decoded; the operator's Secret from the example when it is not
 * rendered.
 */
function source(objects: K8sObject[], kind: 'ConfigMap' | 'Secret', name: string): Record<string, string> {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (found) {
    const data = found.data ?? {};
    return kind === 'Secret'
      ? Object.fromEntries(
          Object.entries(data).map(([key, value]) => [key, Buffer.from(value, 'base64').toString('utf8')]),
        )
      : data;
  }
  assert.equal(kind, 'Secret', `ConfigMap ${name} is referenced and not rendered`);
  assert.equal(
    name,
    operatorSecret,
    `Secret ${name} is neither rendered nor the one switchyard.env.example says to make (${operatorSecret})`,
  );
  return exampleSecret();
}

/** A container's environment as Kubernetes builds it: the image's ENV, then envFrom in order, then env (which wins). */
function environment(objects: K8sObject[], container: Container): Record<string, string> {
  const env: Record<string, string> = { ...finalStage().env };
  for (const from of container.envFrom ?? []) {
    if (from.configMapRef) Object.assign(env, source(objects, 'ConfigMap', from.configMapRef.name));
    if (from.secretRef) Object.assign(env, source(objects, 'Secret', from.secretRef.name));
  }
  for (const variable of container.env ?? []) {
    const ref = variable.valueFrom?.secretKeyRef ?? variable.valueFrom?.configMapKeyRef;
    if (!ref) {
      env[variable.name] = variable.value ?? '';
      continue;
    }
    const values = source(objects, variable.valueFrom?.secretKeyRef ? 'Secret' : 'ConfigMap', ref.name);
    const value = values[ref.key];
    if (value === undefined) {
      assert.ok(
        ref.optional,
        `${container.name}: ${variable.name} comes from ${ref.name}'s key ${ref.key}, which it lacks`,
      );
      continue;
    }
    env[variable.name] = value;
  }
  return env;
}

/** Every variable the gateway reads, from the schema `loadConfig` validates against (families as patterns). */
const known = environmentVariables.map((variable) => variable.pattern ?? new RegExp(`^${variable.name}$`));
/**
 * Not the gateway's: the PostgreSQL client reads it when DATABASE_URL has no password (as docker-compose.yml hands it).
 */
const postgresClient = new Set(['PGPASSWORD']);

/** A gateway container's environment through the config check, every name in it one the gateway reads. */
function configOf(objects: K8sObject[], container: Container): { env: Record<string, string>; config: Config } {
  const env = environment(objects, container);
  const unknown = Object.keys(env).filter(
    (name) => !postgresClient.has(name) && !known.some((pattern) => pattern.test(name)),
  );
  assert.deepEqual(
    unknown,
    [],
    `${container.name}: variables the gateway does not read (a misspelling is ignored, not refused)`,
  );
  return { env, config: loadConfig(env) };
}

/** A named or numbered port of a container. */
function portNumber(container: Container, port: number | string): number {
  if (typeof port === 'number') return port;
  const found = container.ports?.find((p) => p.name === port);
  assert.ok(found, `${container.name}: no port named ${port}`);
  return found.containerPort;
}

const memoryMi = (quantity: string) => {
  const [, amount, unit] = /^(\d+(?:\.\d+)?)(Mi|Gi)$/.exec(quantity) ?? [];
  assert.ok(amount, `a memory quantity in Mi or Gi: ${quantity}`);
  return Number(amount) * (unit === 'Gi' ? 1024 : 1);
};

// ---------------------------------------------------------------------------------------------
// PromQL, as much of it as the scalers use

interface Series {
  labels: Record<string, string>;
  value: number;
}

/** The Prometheus text format: every sample, its name as `__name__`, and `extra` labels (what a scrape adds). */
function samples(text: string, extra: Record<string, string>): Series[] {
  const out: Series[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const [, name, body, value] = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line) ?? [];
    if (!name) continue;
    const labels: Record<string, string> = { __name__: name, ...extra };
    for (const [, key, raw] of (body ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[key!] = raw!;
    out.push({ labels, value: Number(value) });
  }
  return out;
}

/**
 * Evaluates an instant query of vector selectors (`=`, `!=`, `=~`, `!~`) under `sum` and `max`,
 * with or without `by (…)`: what the ScaledObjects ask. Anything else throws, so a query this test
 * cannot read fails rather than passes.
 */
function evaluate(query: string, series: Series[]): Series[] {
  const tokens = query.match(/[A-Za-z_:][A-Za-z0-9_:]*|"(?:[^"\\]|\\.)*"|=~|!~|!=|[(){},=]/g) ?? [];
  assert.equal(tokens.join(''), query.replace(/\s+/g, ''), `the query is made of what this test reads: ${query}`);
  let at = 0;
  const next = () => tokens[at++];
  const expect = (token: string) => assert.equal(next(), token, `${query}: expected ${token}`);
  const expression = (): Series[] => {
    const name = next()!;
    if ((name === 'sum' || name === 'max') && (tokens[at] === '(' || tokens[at] === 'by')) {
      const by: string[] = [];
      if (tokens[at] === 'by') {
        next();
        expect('(');
        while (tokens[at] !== ')') {
          by.push(next()!);
          if (tokens[at] === ',') next();
        }
        expect(')');
      }
      expect('(');
      const inner = expression();
      expect(')');
      const groups = new Map<string, Series>();
      for (const s of inner) {
        const labels = Object.fromEntries(by.map((label) => [label, s.labels[label] ?? '']));
        const key = JSON.stringify(labels);
        const group = groups.get(key);
        if (!group) groups.set(key, { labels, value: s.value });
        else group.value = name === 'sum' ? group.value + s.value : Math.max(group.value, s.value);
      }
      return [...groups.values()];
    }
    assert.match(name, /^switchyard_/, `${query}: a metric of the gateway's, not ${name}`);
    const matchers: Array<{ label: string; op: string; value: string }> = [];
    if (tokens[at] === '{') {
      next();
      while (tokens[at] !== '}') {
        const label = next()!;
        const op = next()!;
        const value = JSON.parse(next()!) as string;
        matchers.push({ label, op, value });
        if (tokens[at] === ',') next();
      }
      expect('}');
    }
    return series.filter(
      (s) =>
        s.labels.__name__ === name &&
        matchers.every(({ label, op, value }) => {
          const actual = s.labels[label] ?? '';
          if (op === '=') return actual === value;
          if (op === '!=') return actual !== value;
          const hit = new RegExp(`^(?:${value})$`).test(actual);
          return op === '=~' ? hit : !hit;
        }),
    );
  };
  const result = expression();
  assert.equal(at, tokens.length, `${query}: read to its end`);
  return result;
}

// ---------------------------------------------------------------------------------------------

describe('deploy/kubernetes, rendered', () => {
  it('has the overlays it says, each rendered by kubectl kustomize', () => {
    assert.deepEqual(overlays, Object.keys(redisOf).sort(), 'every overlay is listed here with the Redis it runs on');
    for (const overlay of overlays) assert.ok(rendered(overlay).length > 20, overlay);
  });

  it('validates every object against the Kubernetes and KEDA schemas, unknown fields included', async () => {
    // The models' JSON schemas: types, required fields, enumerations.
    for (const overlay of overlays) {
      for (const object of rendered(overlay)) {
        const where = `${overlay}: ${object.kind}/${object.metadata.name}`;
        // GA APIs only, but KEDA's, whose one version is v1alpha1.
        if (!object.apiVersion.startsWith('keda.sh/')) assert.doesNotMatch(object.apiVersion, /alpha|beta/, where);
        const module = (await import(`kubernetes-models/${object.apiVersion}`)
          .catch(() => import(`@kubernetes-models/keda/${object.apiVersion}`))
          .catch(() => undefined)) as Record<string, new (data: unknown) => { validate(): void }> | undefined;
        const Model = module?.[object.kind];
        assert.ok(Model, `${where}: no schema for ${object.apiVersion} ${object.kind}`);
        assert.doesNotThrow(() => new Model(object).validate(), where);
      }
    }
    // The schemas let unknown fields through (as Kubernetes' own OpenAPI does); the models' interfaces
    // do not: each object is compiled as a literal of its kind's interface, and a misspelt field is an error.
    // A file the compiler reads from memory (never written), beside this one so the packages resolve as from here.
    const file = `${root}test/unit/kubernetes-objects.generated.ts`;
    const imports = new Map<string, string>();
    const where: Array<{ line: number; what: string }> = [];
    let body = '';
    let line = 0;
    for (const overlay of overlays) {
      for (const object of rendered(overlay)) {
        const module = object.apiVersion.startsWith('keda.sh/')
          ? `@kubernetes-models/keda/${object.apiVersion}`
          : `kubernetes-models/${object.apiVersion}`;
        if (!imports.has(module)) imports.set(module, `M${imports.size}`);
        const text =
          `export const o${where.length}: ${imports.get(module)}.I${object.kind} = ` +
          `${JSON.stringify(object, null, 1)};\n`;
        where.push({ line, what: `${overlay}: ${object.kind}/${object.metadata.name}` });
        line += text.split('\n').length - 1;
        body += text;
      }
    }
    const head = [...imports].map(([module, alias]) => `import type * as ${alias} from '${module}';\n`).join('');
    const source = head + body;
    const options: ts.CompilerOptions = {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: [],
    };
    const host = ts.createCompilerHost(options);
    const { getSourceFile, fileExists, readFile } = host;
    host.getSourceFile = (name, language, ...rest) =>
      name === file ? ts.createSourceFile(name, source, language) : getSourceFile.call(host, name, language, ...rest);
    host.fileExists = (name) => name === file || fileExists.call(host, name);
    host.readFile = (name) => (name === file ? source : readFile.call(host, name));
    const diagnostics = ts.getPreEmitDiagnostics(ts.createProgram([file], options, host)).map((d) => {
      const at =
        d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line - imports.size : -1;
      const object = [...where].reverse().find((w) => w.line <= at);
      return `${object?.what ?? d.file?.fileName ?? 'the check itself'}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
    });
    assert.deepEqual(diagnostics, []);
  });

  it(
    'runs the api and one worker Deployment per capability, as the image runs them, each counted by its autoscaler ' +
      'only',
    () => {
      const image = finalStage();
      for (const overlay of overlays) {
        const objects = rendered(overlay);
        const gateway = gateways(objects);
        assert.deepEqual(
          gateway.map(roleOf).sort(),
          ['api', ...workerCapabilities.map(() => 'worker')].sort(),
          overlay,
        );
        const served = gateway
          .filter((d) => roleOf(d) === 'worker')
          .map((d) => capabilityOf(configOf(objects, d.spec.template.spec.containers[0]!).config));
        assert.deepEqual(
          served.sort(),
          [...workerCapabilities].sort(),
          `${overlay}: one worker Deployment per capability, each serving it alone`,
        );
        const scaled = new Set([
          ...ofKind<ScaledObject>(objects, 'ScaledObject').map((s) => s.spec.scaleTargetRef.name),
          ...ofKind<K8sObject>(objects, 'HorizontalPodAutoscaler').map(
            (h) => (h.spec as { scaleTargetRef: { name: string } }).scaleTargetRef.name,
          ),
        ]);
        for (const deployment of gateway) {
          const [container, ...others] = deployment.spec.template.spec.containers;
          assert.equal(others.length, 0, `${overlay}: ${deployment.metadata.name} runs one container`);
          // node itself, not a shell or npm, in the image's working directory: the kubelet's SIGTERM reaches the gateway.
          assert.deepEqual(
            container!.command!.slice(0, 2),
            image.cmd.slice(0, 2),
            `${overlay}: ${deployment.metadata.name}`,
          );
          assert.ok(scaled.has(deployment.metadata.name), `${overlay}: ${deployment.metadata.name} has an autoscaler`);
          assert.equal(
            deployment.spec.replicas,
            undefined,
            `${overlay}: ${deployment.metadata.name}: no replicas to reset the autoscaler's count at each apply`,
          );
          // A pinned tag, never :latest.
          assert.match(
            container!.image,
            /^[^:]+(:[\w][\w.-]*)$/,
            `${overlay}: ${deployment.metadata.name} image ${container!.image}`,
          );
          assert.doesNotMatch(container!.image, /:latest$/);
          assert.equal(
            container!.image,
            gateway[0]!.spec.template.spec.containers[0]!.image,
            `${overlay}: one image for every role`,
          );
        }
      }
    },
  );

  it(
    'runs every pod non-root, read-only, without privileges, a service-account token or service links, in a ' +
      'namespace that enforces it',
    () => {
      const image = finalStage();
      assert.equal(image.user, 'node', "the image's user; node:24-bookworm-slim gives it uid 1000");
      for (const overlay of overlays) {
        const objects = rendered(overlay);
        const namespace = ofKind<K8sObject>(objects, 'Namespace');
        assert.equal(namespace.length, 1, overlay);
        assert.equal(namespace[0]!.metadata.labels?.['pod-security.kubernetes.io/enforce'], 'restricted', overlay);
        for (const object of objects)
          if (object.kind !== 'Namespace')
            assert.equal(
              object.metadata.namespace,
              namespace[0]!.metadata.name,
              `${overlay}: ${object.kind}/${object.metadata.name}`,
            );
        for (const workload of workloads(objects)) {
          const pod = workload.spec.template.spec;
          const where = `${overlay}: ${workload.metadata.name}`;
          assert.equal(pod.automountServiceAccountToken, false, where);
          assert.equal(pod.enableServiceLinks, false, where);
          assert.equal(pod.securityContext?.runAsNonRoot, true, where);
          assert.ok((pod.securityContext?.runAsUser ?? 0) > 0, where);
          assert.equal(pod.securityContext?.seccompProfile?.type, 'RuntimeDefault', where);
          for (const container of pod.containers) {
            assert.equal(container.securityContext?.readOnlyRootFilesystem, true, where);
            assert.equal(container.securityContext?.allowPrivilegeEscalation, false, where);
            assert.deepEqual(container.securityContext?.capabilities?.drop, ['ALL'], where);
          }
        }
        for (const deployment of gateways(objects))
          assert.equal(
            deployment.spec.template.spec.securityContext?.runAsUser,
            1000,
            `${overlay}: ${deployment.metadata.name} runs as the image's node`,
          );
      }
    },
  );

  it('selects, with every Service, disruption budget and autoscaler, the pods and ports it means', () => {
    for (const overlay of overlays) {
      const objects = rendered(overlay);
      const pods = workloads(objects);
      for (const workload of pods)
        assert.ok(
          matches(workload.spec.selector.matchLabels, workload.spec.template.metadata.labels),
          `${overlay}: ${workload.metadata.name} selects its own pods`,
        );
      for (const service of ofKind<ServiceObject>(objects, 'Service')) {
        const selected = pods.filter((w) => matches(service.spec.selector, w.spec.template.metadata.labels));
        assert.ok(selected.length > 0, `${overlay}: Service ${service.metadata.name} selects pods`);
        for (const port of service.spec.ports) {
          for (const w of selected)
            assert.doesNotThrow(
              () => portNumber(w.spec.template.spec.containers[0]!, port.targetPort ?? port.port),
              `${overlay}: Service ${service.metadata.name} port ${port.targetPort} on ${w.metadata.name}`,
            );
        }
      }
      // Each budget covers one workload's pods exactly (overlapping budgets block evictions).
      for (const budget of ofKind<K8sObject>(objects, 'PodDisruptionBudget')) {
        const selector = (budget.spec as { selector: { matchLabels: Record<string, string> } }).selector.matchLabels;
        const selected = pods.filter((w) => matches(selector, w.spec.template.metadata.labels));
        assert.deepEqual(
          selected.map((w) => w.metadata.name),
          [budget.metadata.name],
          `${overlay}: PodDisruptionBudget ${budget.metadata.name}`,
        );
        // maxUnavailable, so a workload at one replica can still be moved off a node (minAvailable 1 would block it).
        assert.equal((budget.spec as { maxUnavailable?: number }).maxUnavailable, 1, budget.metadata.name);
      }
      for (const gateway of gateways(objects))
        assert.ok(
          ofKind<K8sObject>(objects, 'PodDisruptionBudget').some((b) => b.metadata.name === gateway.metadata.name),
          `${overlay}: ${gateway.metadata.name} has a budget`,
        );
      // The Ingress reaches the api's port.
      for (const ingress of ofKind<K8sObject>(objects, 'Ingress')) {
        const backend = (
          ingress.spec as {
            rules: Array<{
              http: { paths: Array<{ backend: { service: { name: string; port: { name: string } } } }> };
            }>;
          }
        ).rules[0]!.http.paths[0]!.backend.service;
        const service = ofKind<ServiceObject>(objects, 'Service').find((s) => s.metadata.name === backend.name);
        assert.ok(
          service?.spec.ports.some((p) => p.name === backend.port.name),
          `${overlay}: the Ingress's backend ${backend.name}:${backend.port.name}`,
        );
        const api = gateways(objects).find((d) => roleOf(d) === 'api')!;
        assert.ok(
          matches(service!.spec.selector, api.spec.template.metadata.labels),
          `${overlay}: the Ingress goes to the api`,
        );
      }
    }
  });
});

describe('deploy/kubernetes against the gateway', () => {
  it(
    'gives every gateway container an environment the config check accepts, with the record, Redis and a metrics ' +
      'token named outright',
    () => {
      for (const overlay of overlays) {
        const objects = rendered(overlay);
        for (const deployment of gateways(objects)) {
          const container = deployment.spec.template.spec.containers[0]!;
          const where = `${overlay}: ${deployment.metadata.name}`;
          const { config } = configOf(objects, container);
          assert.equal(config.host, '0.0.0.0', `${where}: listens on the pod's network`);
          // Named in the container's own env, from the Secret: a key missing stops the pod, not a fallback to a private
          // Redis or an embedded record.
          for (const name of ['REDIS_URL', 'DATABASE_URL', 'METRICS_TOKEN']) {
            const variable = container.env?.find((v) => v.name === name);
            assert.ok(
              variable?.valueFrom?.secretKeyRef && !variable.valueFrom.secretKeyRef.optional,
              `${where}: ${name} from a required Secret key`,
            );
          }
          assert.match(
            config.databaseUrl ?? '',
            /^postgres(ql)?:\/\//,
            `${where}: the record is a PostgreSQL server, not an embedded one in the pod`,
          );
          assert.ok(
            config.metrics.token,
            `${where}: /metrics behind METRICS_TOKEN (Prometheus scrapes from another pod)`,
          );
          assert.equal(config.redis.kind, redisOf[overlay], `${where}: Redis`);
          assert.equal(config.mock.billed, false, where);
          if (roleOf(deployment) === 'api') {
            assert.equal(config.trustProxy, true, `${where}: behind the Ingress controller`);
            assert.equal(config.port, portNumber(container, 'http'), `${where}: PORT is the container's port`);
          } else {
            assert.equal(
              config.metrics.port,
              portNumber(container, 'metrics'),
              `${where}: METRICS_PORT is the container's port`,
            );
          }
        }
      }
    },
  );

  it('gives the api and the workers one blob store: S3, or one volume every gateway pod mounts at BLOB_DIR', () => {
    for (const overlay of overlays) {
      const objects = rendered(overlay);
      const claims = new Set<string>();
      for (const deployment of gateways(objects)) {
        const pod = deployment.spec.template.spec;
        const { config } = configOf(objects, pod.containers[0]!);
        if (config.s3) {
          assert.ok(config.s3.bucket, overlay);
          claims.add('s3');
          continue;
        }
        const mount = pod.containers[0]!.volumeMounts?.find((m) => m.mountPath === config.blobDir);
        const claim = pod.volumes?.find((v) => v.name === mount?.name)?.persistentVolumeClaim?.claimName;
        assert.ok(
          claim,
          `${overlay}: ${deployment.metadata.name}: BLOB_DIR ${config.blobDir} is a shared volume (the root ` +
            `filesystem is read-only, and pods share no disk)`,
        );
        assert.ok(
          objects.some((o) => o.kind === 'PersistentVolumeClaim' && o.metadata.name === claim),
          `${overlay}: the claim ${claim} is rendered`,
        );
        claims.add(`pvc:${claim}`);
      }
      assert.equal(claims.size, 1, `${overlay}: every gateway pod uses the same store (${[...claims].join(', ')})`);
    }
  });

  it(
    'drains every gateway pod within its termination grace, and keeps workers from being removed faster than they ' +
      'drain',
    () => {
      for (const overlay of overlays) {
        const objects = rendered(overlay);
        const scalers = ofKind<ScaledObject>(objects, 'ScaledObject');
        for (const deployment of gateways(objects)) {
          const pod = deployment.spec.template.spec;
          const container = pod.containers[0]!;
          const { config } = configOf(objects, container);
          const where = `${overlay}: ${deployment.metadata.name}`;
          const preStopMs = (container.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
          // bin/start.ts: the drain (SHUTDOWN_GRACE_MS), then closeMarginMs to close, then 1 s (its exitMarginMs) before
          // it exits anyway.
          const needMs = preStopMs + config.shutdownGraceMs + closeMarginMs + 1000;
          const graceMs = (pod.terminationGracePeriodSeconds ?? 30) * 1000;
          assert.ok(
            graceMs >= needMs,
            `${where}: terminationGracePeriodSeconds ${graceMs / 1000} s covers the preStop, the drain and the ` +
              `close (${needMs / 1000} s)`,
          );
          if (roleOf(deployment) === 'api') {
            assert.ok(preStopMs > 0, `${where}: kept serving while the balancers drop it`);
            continue;
          }
          const queue = capabilityOf(config);
          assert.ok(config.shutdownGraceMs >= 25_000, `${where}: a worker drains at least the default grace`);
          // A tool call's deadline is its server's timeout_ms (up to an hour), not a capability's.
          if (queue !== 'mcp')
            assert.ok(
              config.shutdownGraceMs <= config.deadlineMs[queue as QueueName],
              `${where}: no drain past the request deadline of ${queue}`,
            );
          const scaler = scalers.find((s) => s.spec.scaleTargetRef.name === deployment.metadata.name)!;
          const window =
            scaler.spec.advanced?.horizontalPodAutoscalerConfig?.behavior?.scaleDown?.stabilizationWindowSeconds ?? 300;
          assert.ok(
            window * 1000 >= graceMs,
            `${where}: the scale-down window (${window} s) outlasts a worker's drain (${graceMs / 1000} s)`,
          );
        }
      }
    },
  );

  it('sizes every gateway container: CPU requested (the scalers count against it), memory requested under its limit', () => {
    for (const overlay of overlays) {
      for (const deployment of gateways(rendered(overlay))) {
        const resources = deployment.spec.template.spec.containers[0]!.resources;
        const where = `${overlay}: ${deployment.metadata.name}`;
        assert.ok(resources?.requests?.cpu, `${where}: a CPU request`);
        assert.equal(
          resources?.limits?.cpu,
          undefined,
          `${where}: no CPU limit (a quota stalls the event loop mid-turn)`,
        );
        assert.ok(memoryMi(resources!.requests!.memory!) <= memoryMi(resources!.limits!.memory!), where);
      }
    }
  });

  it(
    'serves every path the api is probed on: /healthz alive while draining, /readyz out of rotation while draining ' +
      'or cut off',
    async () => {
      const state = { redis: true, record: true, draining: false };
      const loopStalls = new LoopStallMonitor();
      const app = new Koa();
      app.silent = true;
      app.use(
        probeRoutes({
          redisReachable: async () => state.redis,
          recordReachable: async () => state.record,
          workersReady: () => true,
          subscriberConnected: () => true,
          draining: () => state.draining,
          vendors: true,
          loopStalls,
          strandedLanes: () => [],
        }).routes(),
      );
      const server = app.listen(0, '127.0.0.1');
      await new Promise((resolve) => server.once('listening', resolve));
      const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const status = async (path: string) => (await fetch(`${base}${path}`)).status;
      try {
        for (const overlay of overlays) {
          const api = gateways(rendered(overlay)).find((d) => roleOf(d) === 'api')!.spec.template.spec.containers[0]!;
          const { config } = configOf(rendered(overlay), api);
          const probes = {
            startup: api.startupProbe?.httpGet,
            readiness: api.readinessProbe?.httpGet,
            liveness: api.livenessProbe?.httpGet,
          };
          for (const [kind, get] of Object.entries(probes)) {
            assert.ok(get, `${overlay}: the api has a ${kind} probe over HTTP`);
            assert.equal(portNumber(api, get.port), config.port, `${overlay}: the ${kind} probe is on the api's port`);
          }
          Object.assign(state, { redis: true, record: true, draining: false });
          for (const get of Object.values(probes))
            assert.equal(await status(get!.path), 200, `${overlay}: ${get!.path} on a healthy api`);
          // Draining (SIGTERM): out of the Service, never restarted for it.
          state.draining = true;
          assert.equal(await status(probes.readiness!.path), 503, `${overlay}: readiness while draining`);
          assert.equal(await status(probes.liveness!.path), 200, `${overlay}: liveness while draining`);
          // Redis or the record away: out of the Service, never restarted for it either.
          Object.assign(state, { redis: false, record: false, draining: false });
          assert.equal(await status(probes.readiness!.path), 503, `${overlay}: readiness without Redis and the record`);
          assert.equal(await status(probes.liveness!.path), 200, `${overlay}: liveness without Redis and the record`);
          assert.ok(
            (api.readinessProbe!.timeoutSeconds ?? 1) * 1000 > readinessPingTimeoutMs,
            `${overlay}: the readiness probe waits for /readyz's own timeouts`,
          );
        }
      } finally {
        loopStalls.stop();
        server.close();
      }
    },
  );

  describe("a worker's probes, on its own listener", () => {
    let redis: PrivateRedis;
    let silent: Server;
    const log = createLogger('silent', 'test');
    before(async () => {
      redis = await startPrivateRedis({ aof: false });
      // A "Redis" that takes the connection and never answers.
      silent = createServer(() => undefined).listen(0, '127.0.0.1');
      await new Promise((resolve) => silent.once('listening', resolve));
    });
    after(async () => {
      silent?.close();
      await redis?.remove();
    });

    it(
      'answers the readiness path while the worker reaches Redis and refuses it while not; the liveness command ' +
        'passes on any answer and fails on none',
      async () => {
        const silentUrl = `redis://127.0.0.1:${(silent.address() as { port: number }).port}`;
        // The probes run once for each different way a worker is probed (the template's, so far); each worker's are read.
        const tried = new Set<string>();
        for (const overlay of overlays) {
          for (const deployment of gateways(rendered(overlay)).filter((d) => roleOf(d) === 'worker')) {
            const container = deployment.spec.template.spec.containers[0]!;
            const where = `${overlay}: ${deployment.metadata.name}`;
            const { config } = configOf(rendered(overlay), container);
            const port = config.metrics.port!;
            for (const probe of [container.startupProbe, container.readinessProbe]) {
              assert.ok(probe?.httpGet, `${where}: startup and readiness over HTTP`);
              assert.equal(portNumber(container, probe.httpGet.port), port, `${where}: probed on METRICS_PORT`);
            }
            const path = container.readinessProbe!.httpGet!.path;
            assert.equal(container.startupProbe!.httpGet!.path, path);
            assert.ok(
              (container.readinessProbe!.timeoutSeconds ?? 1) * 1000 > readinessPingTimeoutMs,
              `${where}: the probe waits for the ping's own timeout`,
            );
            const command = container.livenessProbe?.exec?.command ?? [];
            assert.equal(command[0], 'node', `${where}: liveness run by the image's node`);
            const script = command.slice(1).join(' ');
            assert.ok(
              script.includes(`http://127.0.0.1:${port}${path}`),
              `${where}: liveness asks ${path} on METRICS_PORT`,
            );
            const way = JSON.stringify([path, port, command, config.metrics.token]);
            if (tried.has(way)) continue;
            tried.add(way);
            // The same listener a `--role=worker` process opens (bin/start.ts), on a free port instead of METRICS_PORT.
            // Its exit code, run apart (not synchronously: the listener answers from this process's event loop).
            const live = (listenerPort: number) =>
              new Promise<number | null>((resolve) => {
                const child = spawn(
                  process.execPath,
                  [...command.slice(1, -1), command.at(-1)!.replace(`127.0.0.1:${port}`, `127.0.0.1:${listenerPort}`)],
                  { stdio: 'ignore', timeout: 20_000 },
                );
                child.once('exit', (code) => resolve(code));
              });
            for (const [target, ready] of [
              [redis.url, 200],
              [silentUrl, 503],
            ] as const) {
              const listener = await startMetricsListener(0, '127.0.0.1', log, config.metrics.token, { redis: target });
              try {
                const status = async () => (await fetch(`http://127.0.0.1:${listener.port}${path}`)).status;
                // The listener's own connection to Redis is made as it starts.
                await waitFor(
                  async () => (await status()) === ready,
                  5000,
                  `${where}: ${path} ${ready} with ${ready === 200 ? 'Redis' : 'Redis not answering'}`,
                );
                assert.equal(await live(listener.port), 0, `${where}: alive while it answers (${ready})`);
              } finally {
                await listener.close();
              }
            }
            // Nothing listening: the event loop is not answering.
            const closed = await new Promise<number>((resolve) => {
              const probe = createServer().listen(0, '127.0.0.1', () => {
                const free = (probe.address() as { port: number }).port;
                probe.close(() => resolve(free));
              });
            });
            assert.equal(await live(closed), 1, `${where}: not alive when nothing answers`);
          }
        }
      },
    );
  });

  it(
    "scales each capability's workers on its own jobs, waiting or running, as the api's /metrics serves them to " +
      'Prometheus',
    async () => {
      // Counts of the kind BullMQ's getJobCounts gives each shard, different for every capability and state.
      const counts = new Map<string, QueueDepth>();
      workerCapabilities.forEach((queue, i) =>
        counts.set(
          queue,
          sumDepths([{ waiting: 10 * i + 1, prioritized: 100 * i + 2, active: 1000 * i + 3, delayed: 7, failed: 9 }]),
        ),
      );
      // A capped vendor's lane: its jobs wait for the vendor's cap, not for workers.
      counts.set('lane@openai', sumDepths([{ waiting: 5000, prioritized: 5000, active: 5000, delayed: 0, failed: 0 }]));
      for (const overlay of overlays) {
        const objects = rendered(overlay);
        const api = gateways(objects).find((d) => roleOf(d) === 'api')!;
        const { config: apiConfig } = configOf(objects, api.spec.template.spec.containers[0]!);
        // The api's own /metrics handler, scraped as Prometheus does: with the token, from two replicas that read the
        // same counts.
        const metrics = apiMetrics(
          { metrics: apiConfig.metrics },
          { depths: () => counts.entries(), backlogs: () => [], stranded: () => [] },
          () => undefined,
        );
        const app = new Koa();
        // The envelope that answers the gateway's errors is the server's; here a refusal is its bare status.
        app.silent = true;
        app.use(metrics.scrape);
        const server = app.listen(0, '127.0.0.1');
        await new Promise((resolve) => server.once('listening', resolve));
        const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/metrics`;
        let series: Series[] = [];
        try {
          assert.equal((await fetch(url)).status, 401, `${overlay}: /metrics asks for the token`);
          for (const instance of ['10.0.0.1:8080', '10.0.0.2:8080']) {
            const scrape = await fetch(url, { headers: { authorization: `Bearer ${apiConfig.metrics.token}` } });
            assert.equal(scrape.status, 200, overlay);
            series.push(...samples(await scrape.text(), { instance, job: 'switchyard-api' }));
          }
        } finally {
          server.close();
        }
        const states = new Set(
          series.filter((s) => s.labels.__name__ === 'switchyard_queue_jobs').map((s) => s.labels.state),
        );
        assert.deepEqual([...states].sort(), [...depthStates].sort(), 'the states the api reports');

        const scalers = ofKind<ScaledObject>(objects, 'ScaledObject');
        const workers = gateways(objects).filter((d) => roleOf(d) === 'worker');
        assert.equal(scalers.length, workers.length, `${overlay}: one ScaledObject per worker Deployment`);
        for (const worker of workers) {
          const where = `${overlay}: ${worker.metadata.name}`;
          const container = worker.spec.template.spec.containers[0]!;
          const { config } = configOf(objects, container);
          const queue = capabilityOf(config);
          const mine = scalers.filter((s) => s.spec.scaleTargetRef.name === worker.metadata.name);
          assert.equal(mine.length, 1, `${where}: one ScaledObject`);
          const { spec } = mine[0]!;
          assert.equal(spec.scaleTargetRef.kind ?? 'Deployment', 'Deployment');
          // Never zero: the workers also write usage to the record and serve every vendor lane.
          assert.ok(
            spec.minReplicaCount >= 1 && spec.maxReplicaCount > spec.minReplicaCount,
            `${where}: ${spec.minReplicaCount}..${spec.maxReplicaCount}`,
          );
          const prometheus = spec.triggers.filter((t) => t.type === 'prometheus');
          assert.equal(prometheus.length, 1, `${where}: one trigger on the backlog`);
          const trigger = prometheus[0]!.metadata;
          assert.match(trigger.serverAddress ?? '', /^https?:\/\/[\w.-]+:\d+$/, `${where}: a Prometheus to ask`);
          const result = evaluate(trigger.query!, series);
          assert.equal(result.length, 1, `${where}: one number from ${trigger.query}`);
          const depth = counts.get(queue)!;
          assert.equal(
            result[0]!.value,
            depth.waiting + depth.active,
            `${where}: the query is ${queue}'s jobs waiting or running, once across api replicas, no other queue or lane`,
          );
          // What one worker should hold, within what it can (WORKER_CONCURRENCY_<QUEUE>, REALTIME_SESSIONS_PER_WORKER for
          // realtime).
          const threshold = Number(trigger.threshold);
          if (queue === 'mcp') {
            // Tool calls are held by their servers' caps, not a worker's slots: a bound on the calls per worker.
            assert.ok(threshold > 0 && threshold <= 1000, `${where}: threshold ${threshold}`);
          } else {
            const slots = config.concurrency[queue];
            assert.ok(
              threshold > 0 && threshold <= slots,
              `${where}: threshold ${threshold} within the worker's ${slots} jobs at once`,
            );
            assert.ok(threshold >= slots / 2, `${where}: threshold ${threshold} near the worker's ${slots}`);
          }
          // CPU: against the container's request.
          for (const t of spec.triggers.filter((x) => x.type === 'cpu')) {
            assert.equal(t.metricType, 'Utilization', where);
            assert.ok(container.resources?.requests?.cpu, `${where}: the CPU trigger counts against a request`);
          }
        }
        // The api scales on CPU and memory (held connections), against its requests.
        const hpa = ofKind<K8sObject>(objects, 'HorizontalPodAutoscaler');
        assert.equal(hpa.length, 1, overlay);
        const hpaSpec = hpa[0]!.spec as {
          scaleTargetRef: { kind: string; name: string };
          minReplicas: number;
          maxReplicas: number;
          metrics: Array<{ resource?: { name: string } }>;
        };
        assert.deepEqual([hpaSpec.scaleTargetRef.kind, hpaSpec.scaleTargetRef.name], ['Deployment', api.metadata.name]);
        for (const metric of hpaSpec.metrics)
          assert.ok(
            api.spec.template.spec.containers[0]!.resources?.requests?.[metric.resource!.name],
            `${overlay}: the api requests the ${metric.resource!.name} it scales on`,
          );
      }
    },
  );

  it('keeps streams and WebSockets open through the Ingress, on the host clients are given', () => {
    for (const overlay of overlays) {
      const objects = rendered(overlay);
      const api = gateways(objects).find((d) => roleOf(d) === 'api')!;
      const { config } = configOf(objects, api.spec.template.spec.containers[0]!);
      for (const ingress of ofKind<K8sObject>(objects, 'Ingress')) {
        const annotations = ingress.metadata.annotations ?? {};
        const nginx = (name: string) => annotations[`nginx.ingress.kubernetes.io/${name}`];
        assert.equal(nginx('proxy-buffering'), 'off', `${overlay}: SSE chunks as they come`);
        assert.equal(nginx('proxy-request-buffering'), 'off', `${overlay}: uploads as they come`);
        assert.equal(nginx('proxy-body-size'), '0', `${overlay}: the api's own 413s`);
        // As long as the longest deadline a request may wait with nothing on the wire (deploy/nginx.conf's 3,700 s).
        const longest = Math.max(...Object.values(config.deadlineMs), config.realtimeWorker.maxSessionMs) / 1000;
        for (const timeout of ['proxy-read-timeout', 'proxy-send-timeout'])
          assert.ok(
            Number(nginx(timeout)) >= longest,
            `${overlay}: ${timeout} ${nginx(timeout)} s covers ${longest} s`,
          );
        assert.equal(
          nginx('proxy-read-timeout'),
          /^\s*proxy_read_timeout (\d+)s;/m.exec(read('deploy/nginx.conf'))?.[1],
          'the compose balancer waits as long',
        );
        const spec = ingress.spec as { rules: Array<{ host: string }>; tls?: Array<{ hosts: string[] }> };
        const base = new URL(config.publicBaseUrl ?? '');
        assert.equal(spec.rules[0]!.host, base.host, `${overlay}: the Ingress serves PUBLIC_BASE_URL's host`);
        if (spec.tls) {
          assert.deepEqual(spec.tls[0]!.hosts, [base.host], overlay);
          assert.equal(base.protocol, 'https:', `${overlay}: PUBLIC_BASE_URL is https behind TLS`);
        }
      }
    }
  });

  it(
    "in the in-cluster profile, runs what docker-compose.yml runs and scrapes every gateway pod with the gateway's " +
      'token',
    () => {
      const objects = rendered('in-cluster');
      const compose = parse(read('docker-compose.yml'), { merge: true }) as {
        services: Record<string, { image?: string; command?: string[] }>;
      };
      const images = new Set(workloads(objects).map((w) => w.spec.template.spec.containers[0]!.image));
      assert.ok(images.has(compose.services.redis!.image!), `Redis ${compose.services.redis!.image}`);
      assert.ok(images.has(compose.services.postgres!.image!), `PostgreSQL ${compose.services.postgres!.image}`);
      const redis = workloads(objects).find(
        (w) => w.spec.template.spec.containers[0]!.image === compose.services.redis!.image,
      )!.spec.template.spec.containers[0]!;
      const command = redis.command!.join(' ');
      for (const flag of ['--appendonly yes', '--appendfsync everysec', '--maxmemory-policy noeviction'])
        assert.ok(command.includes(flag), flag);
      // maxmemory about three quarters of what the container may use.
      const maxmemory = Number(/--maxmemory (\d+)mb/.exec(command)?.[1]);
      assert.ok(
        maxmemory <= 0.8 * memoryMi(redis.resources!.limits!.memory!) &&
          maxmemory >= 0.5 * memoryMi(redis.resources!.limits!.memory!),
        `maxmemory ${maxmemory} MB`,
      );

      // Its Prometheus: every api and worker pod, by the headless Services' names, on their ports, with METRICS_TOKEN.
      const prometheus = workloads(objects).find((w) => w.metadata.name === 'switchyard-prometheus')!.spec.template
        .spec;
      const configMap = objects.find(
        (o) =>
          o.kind === 'ConfigMap' && o.metadata.name === prometheus.volumes!.find((v) => v.configMap)!.configMap!.name,
      )!;
      const scrape = parse(configMap.data!['prometheus.yml']!) as {
        scrape_configs: Array<{
          authorization: { credentials_file: string };
          dns_sd_configs: Array<{ names: string[]; port: number }>;
        }>;
      };
      const tokenVolume = prometheus.volumes!.find((v) => v.secret)!;
      const tokenMount = prometheus.containers[0]!.volumeMounts!.find((m) => m.name === tokenVolume.name)!;
      const services = ofKind<ServiceObject>(objects, 'Service');
      const scraped = new Set<string>();
      for (const job of scrape.scrape_configs) {
        const file = job.authorization.credentials_file;
        const item = tokenVolume.secret!.items!.find((i) => `${tokenMount.mountPath}/${i.path}` === file);
        assert.ok(item, `${file} is the mounted Secret's key`);
        const token = source(objects, 'Secret', tokenVolume.secret!.secretName)[item.key];
        for (const sd of job.dns_sd_configs) {
          for (const name of sd.names) {
            const service = services.find((s) => s.metadata.name === name);
            assert.equal(service?.spec.clusterIP, 'None', `${name}: a headless Service, one address per pod`);
            for (const pod of gateways(objects).filter((d) =>
              matches(service!.spec.selector, d.spec.template.metadata.labels),
            )) {
              const container = pod.spec.template.spec.containers[0]!;
              const { config } = configOf(objects, container);
              assert.equal(
                sd.port,
                roleOf(pod) === 'api' ? config.port : config.metrics.port,
                `${name}: the port ${pod.metadata.name} serves /metrics on`,
              );
              assert.equal(token, config.metrics.token, `${name}: the token ${pod.metadata.name} asks for`);
              scraped.add(pod.metadata.name);
            }
          }
        }
      }
      assert.deepEqual(
        [...scraped].sort(),
        gateways(objects)
          .map((d) => d.metadata.name)
          .sort(),
        'every gateway pod is scraped',
      );
      for (const scaler of ofKind<ScaledObject>(objects, 'ScaledObject')) {
        const address = new URL(scaler.spec.triggers[0]!.metadata.serverAddress!);
        const service = services.find((s) => s.metadata.name === address.hostname);
        assert.ok(
          service &&
            matches(
              service.spec.selector,
              workloads(objects).find((w) => w.metadata.name === 'switchyard-prometheus')!.spec.template.metadata
                .labels,
            ),
          `${scaler.metadata.name} asks the in-cluster Prometheus`,
        );
        assert.ok(
          service.spec.ports.some((p) => String(p.port) === address.port),
          address.port,
        );
      }
    },
  );

  it('cites, for what it measured, sections of BENCHMARKS.md or of its dated sittings that exist', () => {
    // BENCHMARKS.md holds the latest figure of each benchmark, docs/benchmarks-history.md every dated sitting:
    // a citation that names its file is looked for there, one that does not in either.
    const pages = ['BENCHMARKS.md', 'docs/benchmarks-history.md'];
    const headingsOf = (page: string): string[] =>
      read(page)
        .split('\n')
        .filter((line) => line.startsWith('#'))
        .map((line) => line.replace(/^#+\s*/, ''));
    const headings = new Map(pages.map((page) => [page, headingsOf(page)]));
    const files = (dir: string): string[] =>
      readdirSync(`${root}${dir}`, { withFileTypes: true }).flatMap((entry) =>
        entry.isDirectory()
          ? files(`${dir}/${entry.name}`)
          : entry.name.endsWith('.yaml')
            ? [`${dir}/${entry.name}`]
            : [],
      );
    const cited: { title: string; in: string[] }[] = [];
    for (const file of files('deploy/kubernetes')) {
      // The comments of a file as one text: a citation may run over two lines.
      const comments = read(file)
        .split('\n')
        .filter((line) => /^\s*#/.test(line))
        .map((line) => line.replace(/^\s*#\s?/, ''))
        .join(' ');
      for (const [, list] of comments.matchAll(/\(((?:"[^"]+"(?:, )?)+)/g))
        for (const [, title] of list!.matchAll(/"([^"]+)"/g)) cited.push({ title: title!, in: pages });
      for (const [, page, title] of comments.matchAll(/(BENCHMARKS\.md|docs\/benchmarks-history\.md),? "([^"]+)"/g))
        cited.push({ title: title!, in: [page!] });
    }
    const titles = new Set(cited.map(({ title }) => title));
    assert.ok(titles.size >= 8, `the sizes say where they come from: ${[...titles].join('; ')}`);
    for (const { title, in: where } of cited) {
      assert.ok(
        where.some((page) => headings.get(page)!.some((heading) => heading.startsWith(title))),
        `"${title}" is a section of ${where.join(' or ')}`,
      );
    }
  });

  it('documents every variable the Secret offers, and only variables the gateway reads', () => {
    const listed = new Set(
      read('docs/configuration.md')
        .split('\n')
        .filter((line) => line.startsWith('| `'))
        .flatMap((line) => [...line.split('|')[1]!.matchAll(/`([^`]+)`/g)].map(([, name]) => name!)),
    );
    for (const name of Object.keys(exampleSecret())) {
      if (postgresClient.has(name)) continue;
      const variable = environmentVariables.find((v) => (v.pattern ?? new RegExp(`^${v.name}$`)).test(name));
      assert.ok(variable, `${name} is a variable the gateway reads`);
      assert.ok(listed.has(name) || listed.has(variable.name), `${name} (${variable.name}) in docs/configuration.md`);
    }
  });
});
