/*
 * What the queue dashboard (/admin/queues) may show of a job. A job carries
 * the client's request (`GatewayJobData.payload`: prompts, tool arguments,
 * inline images as `data:` URLs, base64 audio), a vendor's checkpoint (task
 * ids, polling URLs), its answer (`GatewayJobResult.body`: the response body,
 * with base64 images or embeddings and signed file links) and, when it
 * failed, the error text and stack traces of each attempt. None of them should
 * hold a secret, but any of them can: a client pastes a key into a prompt, a
 * vendor quotes the key it was sent in an error, a URL carries a signature.
 *
 * So every string the dashboard sends goes through `redactText`, every JSON
 * value through `redactValue`:
 * - values of secret-named fields (`authorization`, `api_key`, `password`,
 *   `secret`, `access_token`, `signature`, …) become `[redacted]` whole;
 * - the gateway's known secrets (vendor keys, ADMIN_TOKEN, …) wherever they
 *   appear, and anything secret-shaped: `Bearer …` / `Basic …` credentials,
 *   `key: value` / `key=value` pairs with a secret's name, vendor and
 *   gateway key shapes (`sk-…`, `sy-…`, `xai-…`, `AIza…`, `AKIA…`, …), JWTs,
 *   PEM private keys, the password of a URL, secret query parameters
 *   (`signature`, `sig`, `token`, `key`, `X-Amz-Signature`, …) and long
 *   opaque tokens (32+ characters of letters and digits) become `[redacted]`;
 * - inline uploads are replaced by a reference: a `data:…;base64,…` URL by
 *   `[upload: <type>, <n> bytes]`, a bare base64 string of 128+ characters
 *   (and any base64 value of a field that holds bytes in the OpenAI shapes:
 *   `b64_json`, `input_audio.data`, `file_data`, a base64 `embedding`) by
 *   `[base64: <n> bytes]`, a serialized Buffer by `[binary: <n> bytes]`;
 *   uploads sent as files are already references (`BlobRef`: blob key, type,
 *   size) and stay as they are;
 * - long number arrays (embeddings) become `[<n> numbers]`, strings past
 *   20,000 characters are cut, nesting past 32 levels is cut.
 */

const REDACTED = '[redacted]';

/** Field names whose value is a secret whatever it looks like (compared lowercased, without `-` and `_`). */
const secretFieldNames = new Set([
  'authorization',
  'proxyauthorization',
  'cookie',
  'setcookie',
  'apikey',
  'xapikey',
  'xgoogapikey',
  'apisecret',
  'password',
  'passwd',
  'secret',
  'clientsecret',
  'secretkey',
  'secretaccesskey',
  'accesstoken',
  'refreshtoken',
  'idtoken',
  'sessiontoken',
  'authtoken',
  'bearertoken',
  'privatekey',
  'signature',
  'credentials',
]);

const isSecretField = (name: string) => secretFieldNames.has(name.toLowerCase().replace(/[-_]/g, ''));

/**
 * Fields that hold base64 bytes in the OpenAI shapes (`b64_json` images, `input_audio.data` and chat audio,
 * Responses `file_data` and image results, base64 `embedding`s): their value is a reference even when short.
 */
const binaryFieldNames = new Set([
  'b64json',
  'b64',
  'data',
  'filedata',
  'imagedata',
  'audiodata',
  'partialimageb64',
  'result',
  'embedding',
]);
const isBinaryField = (name: string) => binaryFieldNames.has(name.toLowerCase().replace(/[-_]/g, ''));
const binaryFieldMinLength = 24;

type Replacement = string | ((match: string, ...groups: string[]) => string);
/** Secret-shaped text, replaced in order; a pattern runs only on text holding its needle (a cheap `includes` first). */
const secretPatterns: Array<[RegExp, Replacement, string?]> = [
  // PEM private keys, whole.
  [/-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g, REDACTED, 'PRIVATE KEY'],
  // HTTP credentials: `Bearer <token>`, `Basic <base64>`.
  [/\b(Bearer)\s+[^\s"',;]+/gi, `$1 ${REDACTED}`],
  [/\b(Basic)\s+[A-Za-z0-9+/]{8,}={0,2}/g, `$1 ${REDACTED}`],
  // `Authorization: …`, `api_key=…`, `"password": "…"` in free text (a header dump, a query, a config echo).
  [
    /(?<![A-Za-z0-9_-])((?:proxy-)?authorization|x-api-key|x-goog-api-key|api[-_]?key|api[-_]?secret|client[-_]?secret|secret(?:[-_]?access)?[-_]?key|password|passwd|secret|(?:access|refresh|id|session|auth)[-_]?token|token)("?\s*[:=]\s*"?)(?!\s*(?:\[redacted\]|Bearer\s|Basic\s))([^\s"',;&]+)/gi,
    (_match, name: string, separator: string) => `${name}${separator}${REDACTED}`,
  ],
  // The password of a URL (`https://user:password@host`).
  [/\b([a-z][a-z0-9+.-]*:\/\/)[^/\s:@"']+:[^/\s@"']+@/gi, `$1${REDACTED}@`, '://'],
  // Secret query parameters of a URL (signed links, S3 and GCS presigned URLs, keys in a query).
  [
    /([?&](?:signature|sig|token|access_token|id_token|key|api_key|apikey|api-key|secret|password|auth|x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential)=)[^&\s"'#<>]+/gi,
    `$1${REDACTED}`,
    '=',
  ],
  // Vendor and gateway key shapes: OpenAI and Anthropic `sk-…`, the gateway's own `sy-…`, xAI, Groq, Hugging Face,
  // NVIDIA, Perplexity, Replicate, GitHub, GitLab, Slack, Google `AIza…`, AWS access key ids, JWTs.
  [
    /(?<![A-Za-z0-9])(?:sk|rk|sy|xai|gsk|hf|nvapi|pplx|r8|glpat|gh[pousr]|github_pat)[-_][A-Za-z0-9_*.-]{6,}/g,
    REDACTED,
  ],
  [/(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}/g, REDACTED, 'xox'],
  [/(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{20,}/g, REDACTED, 'AIza'],
  [/(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])/g, REDACTED],
  [/(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, REDACTED, 'eyJ'],
];

/**
 * The gateway's own ids (`req_` + 32 hex digits, `resp_`, `video_`, `acct_`, `chatcmpl-`…): long, opaque, and not
 * secret.
 */
const gatewayId = /^(?:req|resp|video|acct|key|chatcmpl|cmpl)[_-][0-9a-f]{16,64}$/;

/**
 * A long opaque token (hex, base64url): 32+ characters holding both letters and digits (checked on the match: cheaper
 * than lookaheads).
 */
const opaqueToken = /(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{32,}(?![A-Za-z0-9_-])(?:={1,2}(?![A-Za-z0-9_=-]))?/g;
const isOpaqueToken = (match: string) => /\d/.test(match) && /[A-Za-z]/.test(match) && !gatewayId.test(match);
/** A long base64 token with `+` or `/` in it (an AWS secret key): 40+ characters of mixed case and digits. */
const opaqueBase64 = /(?<![A-Za-z0-9+/=_.-])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=_.-])/g;
const isOpaqueBase64 = (match: string) =>
  /[+/]/.test(match) && /\d/.test(match) && /[a-z]/.test(match) && /[A-Z]/.test(match);

/** `data:<type>[;params];base64,<data>` anywhere in a string. */
const dataUrl = /data:([\w.+-]+\/[\w.+-]+)?((?:;[\w.+-]+=[^;,\s"']*)*);base64,([A-Za-z0-9+/_-]*={0,2})/gi;
/** A whole string of base64 (or base64url), line breaks allowed. */
const bareBase64 = /^[A-Za-z0-9+/_-]+={0,2}$/;
const bareBase64MinLength = 128;

const maxStringLength = 20_000;
/** Characters of text one job's data (or return value) shows at most; the rest reads `[n characters not shown]`. */
const jobBudget = 8_000;
/** The same for everything else of one answer of the dashboard's API (failed reasons, stack traces, logs). */
const answerBudget = 200_000;
const maxDepth = 32;
const maxNumberArray = 64;

const base64Bytes = (text: string) => Math.floor((text.replace(/=+$/, '').length * 3) / 4);

export interface Redactor {
  /** A string as the dashboard may show it. */
  text(value: string): string;
  /** A JSON value (job data, return value, progress…) as the dashboard may show it. */
  value(value: unknown): unknown;
  /**
   * Every string of a JSON value through `text`, and secret-named fields
   * redacted, but its shape kept (number arrays, Buffers): for whole answers
   * of the dashboard's API, whose metrics are long number arrays.
   */
  strings(value: unknown): unknown;
  /**
   * A job's return value (`GatewayJobResult`): its `body` is the response body
   * as a string; a JSON body is shown parsed (so its base64 images and secret
   * fields are found as such), any other body (SSE, srt, plain text) as text.
   */
  returnValue(value: unknown): unknown;
}

/**
 * A redactor that also replaces each of `knownSecrets` (vendor keys, the admin
 * token…) wherever it appears; secrets shorter than 8 characters are left to
 * the patterns, or they would shred ordinary words.
 */
export function createRedactor(knownSecrets: Iterable<string | undefined> = []): Redactor {
  const secrets = [
    ...new Set(
      [...knownSecrets].filter((secret): secret is string => typeof secret === 'string' && secret.length >= 8),
    ),
  ]
    // Longest first, so a secret that contains another is replaced whole.
    .sort((a, b) => b.length - a.length);

  // Characters the current call may still show: redaction runs on the api's event loop, so what one job (or one
  // answer) costs it is bounded, however large the job's data.
  let budget = Number.POSITIVE_INFINITY;
  const within = <T>(characters: number, run: () => T): T => {
    const outer = budget;
    budget = Math.min(outer, characters);
    try {
      return run();
    } finally {
      budget = outer === Number.POSITIVE_INFINITY ? outer : Math.max(0, outer - (characters - budget));
    }
  };

  const text = (input: string): string => {
    if (budget <= 0) return input.length === 0 ? input : `[${input.length} characters not shown]`;
    const cap = Math.min(maxStringLength, budget);
    budget -= Math.min(input.length, cap);
    let out = input.length > cap ? `${input.slice(0, cap)}… [${input.length - cap} more characters]` : input;
    // Line breaks are allowed inside base64 (MIME wraps it), spaces are not: prose must not pass for it.
    const compact = out.length >= bareBase64MinLength ? out.replace(/[\r\n]+/g, '') : '';
    if (compact.length >= bareBase64MinLength && bareBase64.test(compact)) {
      return `[base64: ${base64Bytes(input.replace(/[\r\n]+/g, ''))} bytes]`;
    }
    out = out.replace(
      dataUrl,
      (_match, type: string | undefined, _params: string, data: string) =>
        `[upload: ${type ?? 'unknown type'}, ${base64Bytes(data)} bytes]`,
    );
    for (const secret of secrets) if (out.includes(secret)) out = out.split(secret).join(REDACTED);
    for (const [pattern, replacement, needle] of secretPatterns) {
      if (needle === undefined || out.includes(needle)) out = out.replace(pattern, replacement as string);
    }
    out = out.replace(opaqueToken, (match) => (isOpaqueToken(match) ? REDACTED : match));
    out = out.replace(opaqueBase64, (match) => (isOpaqueBase64(match) ? REDACTED : match));
    return out;
  };

  /** What `value` made: `strings` passes it through as it is (a job's formatted data inside a whole answer). */
  const redacted = new WeakSet<object>();
  const value = (input: unknown, reshape: boolean, depth = 0): unknown => {
    if (typeof input === 'string') return text(input);
    if (input === null || typeof input !== 'object') return input;
    if (!reshape && redacted.has(input)) return input;
    if (depth >= maxDepth) return '[nested too deep]';
    if (Array.isArray(input)) {
      if (reshape && input.length > maxNumberArray && input.every((item) => typeof item === 'number'))
        return `[${input.length} numbers]`;
      return input.map((item) => value(item, reshape, depth + 1));
    }
    const record = input as Record<string, unknown>;
    // A Buffer as JSON.stringify writes it.
    if (reshape && record.type === 'Buffer' && Array.isArray(record.data) && Object.keys(record).length === 2)
      return `[binary: ${record.data.length} bytes]`;
    const out: Record<string, unknown> = {};
    for (const [name, item] of Object.entries(record)) {
      if (isSecretField(name) && item !== null && item !== undefined && item !== '') out[name] = REDACTED;
      else if (
        typeof item === 'string' &&
        item.length >= binaryFieldMinLength &&
        isBinaryField(name) &&
        bareBase64.test(item.replace(/[\r\n]+/g, ''))
      ) {
        out[name] = `[base64: ${base64Bytes(item.replace(/[\r\n]+/g, ''))} bytes]`;
      } else out[name] = value(item, reshape, depth + 1);
    }
    return out;
  };

  const made = (output: unknown): unknown => {
    if (output !== null && typeof output === 'object') redacted.add(output);
    return output;
  };

  const returnValue = (input: unknown): unknown => {
    if (
      input &&
      typeof input === 'object' &&
      !Array.isArray(input) &&
      typeof (input as { body?: unknown }).body === 'string'
    ) {
      const record = input as Record<string, unknown> & { body: string };
      let parsed: unknown;
      try {
        parsed = JSON.parse(record.body);
      } catch {
        parsed = undefined;
      }
      const body = parsed !== null && typeof parsed === 'object' ? value(parsed, true) : text(record.body);
      return made({ ...(value({ ...record, body: undefined }, true) as Record<string, unknown>), body });
    }
    return made(value(input, true));
  };

  return {
    text: (input) => within(maxStringLength, () => text(input)),
    value: (input) => within(jobBudget, () => made(value(input, true))),
    strings: (input) => within(answerBudget, () => value(input, false)),
    returnValue: (input) => within(jobBudget, () => returnValue(input)),
  };
}
