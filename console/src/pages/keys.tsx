import { Fragment, type TargetedEvent, type TargetedSubmitEvent } from 'preact';
import { useState } from 'preact/hooks';
import { api, messageOf } from '../api';
import { useAccount, useApp, useTeam } from '../app-context';
import { teamName } from '../teams';
import { type Column, DataTable } from '../components/data-table';
import { Snippet } from '../components/snippet';
import { parseToolPatterns } from '../tool-patterns';
import {
  ConfirmDialog,
  Dialog,
  DialogFormActions,
  ErrorMessage,
  InputField,
  PageHeader,
  StatusMessage,
  modelList,
  optionalNumber,
  useApi,
  useCopy,
  useTitle,
} from '../components/ui';
import { ago, dateInputValue, dateTime, endOfLocalDay, money, shortDate, todayInputValue } from '../format';
import {
  defaultAccountId,
  type BudgetPeriod,
  type CreatedKey,
  type Key,
  type KeyLimitValues,
  type List,
} from '../types';

interface KeyDraft {
  name: string;
  limit: string;
  rpm: string;
  tpm: string;
  models: string;
  expires: string;
  cacheTtl: string;
  /** The budget per period: an amount (empty: none) and its period. */
  budget: string;
  budgetPeriod: BudgetPeriod;
  /** The MCP tools it may use, `server/tool` patterns (an admin's; empty: every tool its team allows). */
  tools: string;
}

const emptyDraft: KeyDraft = {
  name: '',
  limit: '',
  rpm: '',
  tpm: '',
  models: '',
  expires: '',
  cacheTtl: '',
  budget: '',
  budgetPeriod: 'month',
  tools: '',
};

/** The most seconds a key's default cache TTL may name (a year; the API's bound). */
const maxCacheTtlS = 31_536_000;

function draftOf(key: Key): KeyDraft {
  return {
    name: key.name,
    limit: key.limit_usd == null ? '' : String(key.limit_usd),
    rpm: key.rpm == null ? '' : String(key.rpm),
    tpm: key.tpm == null ? '' : String(key.tpm),
    models: key.models?.join(', ') ?? '',
    expires: dateInputValue(key.expires_at),
    cacheTtl: key.cache_ttl_s == null ? '' : String(key.cache_ttl_s),
    budget: key.budget_usd == null ? '' : String(key.budget_usd),
    budgetPeriod: key.budget_period ?? 'month',
    tools: key.mcp_tools?.join(', ') ?? '',
  };
}

interface KeyFieldsValue {
  name: string;
  limit_usd: number | null;
  rpm: number | null;
  tpm: number | null;
  models: string[] | null;
  expires_at: number | null;
  cache_ttl_s: number | null;
  budget_usd: number | null;
  budget_period: BudgetPeriod;
  mcp_tools: string[] | null;
}

/** The draft as API fields (null for "none"), or the first problem with it. */
function parseDraft(draft: KeyDraft): KeyFieldsValue | string {
  const name = draft.name.trim();
  if (!name) return 'Give the key a name.';
  const limit = optionalNumber(draft.limit);
  if (limit !== undefined && (!Number.isFinite(limit) || limit < 0))
    return 'The spend limit must be a positive amount in USD.';
  const perMinute = (text: string, label: string) => {
    const value = optionalNumber(text);
    if (value !== undefined && (!Number.isInteger(value) || value < 1))
      return `${label} must be a whole number of at least 1.`;
    return value ?? null;
  };
  const rpm = perMinute(draft.rpm, 'RPM');
  if (typeof rpm === 'string') return rpm;
  const tpm = perMinute(draft.tpm, 'TPM');
  if (typeof tpm === 'string') return tpm;
  const cacheTtl = optionalNumber(draft.cacheTtl);
  if (cacheTtl !== undefined && (!Number.isInteger(cacheTtl) || cacheTtl < 0 || cacheTtl > maxCacheTtlS))
    return `The cache TTL must be a whole number of seconds from 0 to ${maxCacheTtlS.toLocaleString()}.`;
  const budget = optionalNumber(draft.budget);
  if (budget !== undefined && (!Number.isFinite(budget) || budget < 0))
    return 'The budget must be a positive amount in USD.';
  let expires: number | null = null;
  if (draft.expires) {
    const at = endOfLocalDay(draft.expires);
    if (at === undefined) return 'Pick the expiry date from the calendar.';
    if (at * 1000 < Date.now()) return 'The expiry date has passed already.';
    expires = at;
  }
  const tools = parseToolPatterns(draft.tools);
  if (typeof tools === 'string') return tools;
  return {
    name,
    limit_usd: limit ?? null,
    rpm,
    tpm,
    models: modelList(draft.models) ?? null,
    expires_at: expires,
    cache_ttl_s: cacheTtl ?? null,
    budget_usd: budget ?? null,
    budget_period: draft.budgetPeriod,
    mcp_tools: tools.length > 0 ? tools : null,
  };
}

/**
 * The most a member may set on a key: what an admin set, else (rpm, tpm) the gateway's defaults; an admin is
 * not bounded (undefined). The API refuses more; the form says so before.
 */
interface KeyCeilings {
  admin: Partial<KeyLimitValues>;
  defaults: { rpm: number | null; tpm: number | null };
}

function ceilingsFor(
  role: string | undefined,
  key: Key | undefined,
  defaults: KeyCeilings['defaults'] | undefined,
): KeyCeilings | undefined {
  if (role === 'admin') return undefined;
  return { admin: key?.admin_limits ?? {}, defaults: defaults ?? { rpm: null, tpm: null } };
}

/** The draft against the ceilings: the first limit it would raise, widen or remove, said as the API would. */
function ceilingProblem(
  parsed: KeyFieldsValue,
  ceilings: KeyCeilings | undefined,
  changed: (field: keyof KeyLimitValues) => boolean,
): string | undefined {
  if (!ceilings) return undefined;
  const { admin, defaults } = ceilings;
  for (const field of ['limit_usd', 'rpm', 'tpm', 'expires_at'] as const) {
    if (!changed(field)) continue;
    const set = admin[field] ?? null;
    const ceiling = set ?? (field === 'rpm' || field === 'tpm' ? defaults[field] : null);
    const value = parsed[field];
    if (ceiling === null) continue;
    if (value === null ? set !== null : value > ceiling) {
      return set !== null
        ? `${labels[field]} was set by an administrator: you can lower it, not raise or remove it.`
        : `${labels[field]} can be at most ${ceiling.toLocaleString()} on this gateway.`;
    }
  }
  if (changed('models') && admin.models) {
    const allowed = admin.models;
    if (!parsed.models || parsed.models.some((model) => !allowed.includes(model)))
      return `The models were set by an administrator: you can only narrow the list (${allowed.join(', ')}).`;
  }
  return undefined;
}

const labels = {
  limit_usd: 'The spend limit',
  rpm: 'RPM',
  tpm: 'TPM',
  expires_at: 'The expiry',
  models: 'The models',
} as const;

/**
 * What a key's cache TTL field says of its account's cap (an admin's): none, caching off, or at most so many seconds.
 */
function cacheCapText(cap: number | null | undefined): string {
  if (cap == null) return '';
  return cap === 0
    ? ' Caching is off for this account.'
    : ` This account keeps answers at most ${cap.toLocaleString()} s.`;
}

function KeyFields({
  idPrefix,
  draft,
  onChange,
  autoFocus,
  ceilings,
  cacheCap,
  tools,
}: {
  idPrefix: string;
  draft: KeyDraft;
  onChange: (draft: KeyDraft) => void;
  autoFocus?: boolean;
  ceilings?: KeyCeilings;
  /** The cache cap of the key's account, when known (the member's own). */
  cacheCap?: number | null | undefined;
  /** The MCP tools field: an admin's, changing any key. */
  tools?: boolean;
}) {
  const set = (field: keyof KeyDraft) => (event: TargetedEvent<HTMLInputElement>) =>
    onChange({ ...draft, [field]: event.currentTarget.value });
  const id = (field: string) => `${idPrefix}-${field}`;
  const admin = ceilings?.admin ?? {};
  const bound = (field: 'rpm' | 'tpm') => admin[field] ?? ceilings?.defaults[field] ?? null;
  const byAdmin = 'Set by an administrator: you can lower it, not raise or remove it.';
  /** A rate field (RPM, TPM): a whole number, at most the administrator's ceiling, else the gateway's default. */
  const rateField = (field: 'rpm' | 'tpm', label: string, what: string) => {
    const most = bound(field);
    return (
      <div class="field">
        <label for={id(field)}>{label}</label>
        <input
          id={id(field)}
          type="number"
          min="1"
          max={most ?? undefined}
          step="1"
          inputMode="numeric"
          value={draft[field]}
          onInput={set(field)}
          placeholder={most === null ? 'No limit' : `At most ${most.toLocaleString()}`}
          aria-describedby={id(`${field}-hint`)}
        />
        <p class="field-hint" id={id(`${field}-hint`)}>
          {what}
          {admin[field] != null ? `. ${byAdmin}` : ''}
        </p>
      </div>
    );
  };
  return (
    <div class="form-grid">
      <div class="field field-wide">
        <label for={id('name')}>Name</label>
        <input
          id={id('name')}
          type="text"
          required
          maxLength={200}
          value={draft.name}
          onInput={set('name')}
          autoFocus={autoFocus}
          placeholder="e.g. Production backend"
          autoComplete="off"
        />
      </div>
      <div class="field">
        <label for={id('limit')}>Spend limit (USD)</label>
        <input
          id={id('limit')}
          type="number"
          min="0"
          max={admin.limit_usd ?? undefined}
          step="any"
          inputMode="decimal"
          value={draft.limit}
          onInput={set('limit')}
          placeholder={admin.limit_usd == null ? 'No limit' : `At most ${admin.limit_usd}`}
          aria-describedby={admin.limit_usd == null ? undefined : id('limit-hint')}
        />
        {admin.limit_usd != null && (
          <p class="field-hint" id={id('limit-hint')}>
            {byAdmin}
          </p>
        )}
      </div>
      <div class="field">
        <label for={id('budget')}>Budget (USD)</label>
        <input
          id={id('budget')}
          type="number"
          min="0"
          step="any"
          inputMode="decimal"
          value={draft.budget}
          onInput={set('budget')}
          placeholder="No budget"
          aria-describedby={id('budget-hint')}
        />
        <p class="field-hint" id={id('budget-hint')}>
          What it may spend per period, beside its limit. Empty: none.
        </p>
      </div>
      <div class="field">
        <label for={id('budget-period')}>Budget period</label>
        <select
          id={id('budget-period')}
          value={draft.budgetPeriod}
          onChange={(event) => onChange({ ...draft, budgetPeriod: event.currentTarget.value as BudgetPeriod })}
          aria-describedby={id('budget-period-hint')}
        >
          {budgetPeriods.map((period) => (
            <option key={period} value={period}>
              {budgetPeriodLabels[period]}
            </option>
          ))}
        </select>
        <p class="field-hint" id={id('budget-period-hint')}>
          Periods start at 00:00 UTC.
        </p>
      </div>
      {rateField('rpm', 'RPM', 'Requests per minute')}
      {rateField('tpm', 'TPM', 'Tokens per minute')}
      <div class="field">
        <label for={id('expires')}>Expires</label>
        <input
          id={id('expires')}
          type="date"
          min={todayInputValue()}
          value={draft.expires}
          onInput={set('expires')}
          aria-describedby={id('expires-hint')}
        />
        <p class="field-hint" id={id('expires-hint')}>
          {admin.expires_at != null
            ? `Set by an administrator: ${dateTime(admin.expires_at)} at the latest.`
            : 'Empty: never'}
        </p>
      </div>
      <InputField
        id={id('models')}
        label="Allowed models"
        type="text"
        wide
        value={draft.models}
        onValue={(models) => onChange({ ...draft, models })}
        placeholder="All models"
        spellcheck={false}
        hint={
          admin.models
            ? `Set by an administrator: only ${admin.models.join(', ')}; you can narrow the list.`
            : 'Comma separated, e.g. gpt-4o-mini, claude-sonnet-4-5. Empty: every model.'
        }
      />
      <div class="field">
        <label for={id('cache-ttl')}>Cache TTL (s)</label>
        <input
          id={id('cache-ttl')}
          type="number"
          min="0"
          max={maxCacheTtlS}
          step="1"
          inputMode="numeric"
          value={draft.cacheTtl}
          onInput={set('cacheTtl')}
          placeholder="None"
          aria-describedby={id('cache-ttl-hint')}
        />
        <p class="field-hint" id={id('cache-ttl-hint')}>
          Requests that send no Cache-Control are cached this long. Empty: none.{cacheCapText(cacheCap)}
        </p>
      </div>
      {tools && (
        <InputField
          id={id('tools')}
          label="MCP tools"
          type="text"
          wide
          value={draft.tools}
          onValue={(tools) => onChange({ ...draft, tools })}
          placeholder="Every tool its team allows"
          spellcheck={false}
          hint={
            <>
              The tools of the MCP servers it may use: server/tool patterns, comma separated, e.g. notes/*,
              github/create_issue. Empty: every tool its team allows.
            </>
          }
        />
      )}
    </div>
  );
}

/** The new-key form, in a dialog: on a phone the list of keys comes first, the form only when asked for. */
function CreateKeyDialog({ onCreated, onClose }: { onCreated: (key: CreatedKey) => void; onClose: () => void }) {
  const { account, config } = useApp();
  const ceilings = ceilingsFor(account?.role, undefined, config.key_defaults);
  const [draft, setDraft] = useState<KeyDraft>(emptyDraft);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);

  const submit = async (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy) return;
    const parsed = parseDraft(draft);
    if (typeof parsed === 'string') {
      setError(parsed);
      return;
    }
    const over = ceilingProblem(parsed, ceilings, (field) => parsed[field] !== null);
    if (over) {
      setError(over);
      return;
    }
    setError(undefined);
    setBusy(true);
    try {
      const body: Record<string, unknown> = { name: parsed.name };
      if (parsed.limit_usd !== null) body.limit_usd = parsed.limit_usd;
      if (parsed.rpm !== null) body.rpm = parsed.rpm;
      if (parsed.tpm !== null) body.tpm = parsed.tpm;
      if (parsed.models !== null) body.models = parsed.models;
      if (parsed.expires_at !== null) body.expires_at = parsed.expires_at;
      if (parsed.cache_ttl_s !== null) body.cache_ttl_s = parsed.cache_ttl_s;
      if (parsed.budget_usd !== null)
        Object.assign(body, { budget_usd: parsed.budget_usd, budget_period: parsed.budget_period });
      const created = await api<CreatedKey>('POST', '/keys', body);
      setDraft(emptyDraft);
      onCreated(created);
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setBusy(false);
    }
  };

  return (
    <Dialog title="New key" onClose={onClose} wide>
      <form onSubmit={submit} class="key-form" noValidate>
        <KeyFields
          idPrefix="new-key"
          draft={draft}
          onChange={setDraft}
          autoFocus
          ceilings={ceilings}
          cacheCap={account?.cache_max_ttl_s}
        />
        <ErrorMessage message={error} />
        <DialogFormActions onCancel={onClose} busy={busy} submit="Create key" />
      </form>
    </Dialog>
  );
}

function snippets(baseUrl: string, secret: string, model: string) {
  const root = baseUrl.replace(/\/+$/, '');
  const curl = [
    `curl ${root}/v1/chat/completions \\`,
    `  -H "Authorization: Bearer ${secret}" \\`,
    `  -H "Content-Type: application/json" \\`,
    `  -d '{"model": "${model}", "messages": [{"role": "user", "content": "Hello!"}]}'`,
  ].join('\n');
  const python = [
    'from openai import OpenAI',
    '',
    `client = OpenAI(base_url="${root}/v1", api_key="${secret}")`,
    'reply = client.chat.completions.create(',
    `    model="${model}",`,
    '    messages=[{"role": "user", "content": "Hello!"}],',
    ')',
    'print(reply.choices[0].message.content)',
  ].join('\n');
  const js = [
    "import OpenAI from 'openai';",
    '',
    `const client = new OpenAI({ baseURL: '${root}/v1', apiKey: '${secret}' });`,
    'const reply = await client.chat.completions.create({',
    `  model: '${model}',`,
    "  messages: [{ role: 'user', content: 'Hello!' }],",
    '});',
    'console.log(reply.choices[0].message.content);',
  ].join('\n');
  return { curl, python, js };
}

/** Shows a new key's secret, this once. Unmounting it (closing) drops the secret for good. */
function SecretDialog({ created, onClose }: { created: CreatedKey; onClose: () => void }) {
  const { config } = useApp();
  const [copied, copy, copyError] = useCopy();
  const model = created.models?.[0] ?? 'gpt-4o-mini';
  const code = snippets(config.base_url, created.key, model);
  return (
    <Dialog title="Save your API key" onClose={onClose} wide>
      <p class="dialog-lead">
        This is the only time the secret of <strong>{created.name}</strong> is shown. Copy it now and keep it somewhere
        safe: if you lose it, revoke the key and create a new one.
      </p>
      <div class="field">
        <label for="new-secret">Secret key</label>
        <div class="copy-row">
          {/* A text area, not an input: on a phone the key wraps onto a second line instead of running out of sight. */}
          <textarea
            id="new-secret"
            class="mono secret-field"
            rows={1}
            readOnly
            value={created.key}
            onFocus={(e) => e.currentTarget.select()}
            spellcheck={false}
            autoComplete="off"
          />
          <button
            type="button"
            class="button button-primary"
            onClick={() => void copy(created.key)}
            aria-label="Copy key"
          >
            {copied ? 'Copied' : 'Copy'}
          </button>
        </div>
        <p class="status-line" role="status" aria-live="polite">
          {copied ? <span class="status-ok">Copied to the clipboard.</span> : null}
        </p>
        <ErrorMessage message={copyError} />
      </div>
      <Snippet title="curl" label="curl example" code={code.curl} secret={created.key} />
      <Snippet title="Python (openai)" label="Python example" code={code.python} secret={created.key} />
      <Snippet title="JavaScript (openai)" label="JavaScript example" code={code.js} secret={created.key} />
      <div class="dialog-actions">
        <button type="button" class="button button-secondary" onClick={onClose}>
          Done
        </button>
      </div>
    </Dialog>
  );
}

/** Where a key is changed: the account's own keys at /keys, any key (an admin's) at /admin/keys. */
type KeysBase = '/keys' | '/admin/keys';

function EditKeyDialog({
  keyRecord,
  onClose,
  onSaved,
  base = '/keys',
  cacheCap,
}: {
  keyRecord: Key;
  onClose: () => void;
  onSaved: (key: Key) => void;
  base?: KeysBase;
  /** The cache cap of the key's account, where known (null: none; 0: caching off). */
  cacheCap?: number | null | undefined;
}) {
  const { account, config } = useApp();
  const ceilings = ceilingsFor(account?.role, keyRecord, config.key_defaults);
  const initial = draftOf(keyRecord);
  const [draft, setDraft] = useState<KeyDraft>(initial);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);

  const submit = async (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy) return;
    const parsed = parseDraft({ ...draft, expires: draft.expires === initial.expires ? '' : draft.expires });
    if (typeof parsed === 'string') {
      setError(parsed);
      return;
    }
    // Only what changed: an untouched expiry keeps its exact time.
    const body: Record<string, unknown> = {};
    if (draft.name !== initial.name) body.name = parsed.name;
    if (draft.limit !== initial.limit) body.limit_usd = parsed.limit_usd;
    if (draft.rpm !== initial.rpm) body.rpm = parsed.rpm;
    if (draft.tpm !== initial.tpm) body.tpm = parsed.tpm;
    if (draft.models !== initial.models) body.models = parsed.models;
    if (draft.expires !== initial.expires) body.expires_at = parsed.expires_at;
    if (draft.cacheTtl !== initial.cacheTtl) body.cache_ttl_s = parsed.cache_ttl_s;
    if (base === '/admin/keys' && draft.tools !== initial.tools) body.mcp_tools = parsed.mcp_tools;
    // The amount and its period go together (the API takes no period alone); an emptied amount clears the budget.
    if (draft.budget !== initial.budget || (draft.budget !== '' && draft.budgetPeriod !== initial.budgetPeriod)) {
      body.budget_usd = parsed.budget_usd;
      if (parsed.budget_usd !== null) body.budget_period = parsed.budget_period;
    }
    if (Object.keys(body).length === 0) {
      onClose();
      return;
    }
    const over = ceilingProblem(parsed, ceilings, (field) => field in body);
    if (over) {
      setError(over);
      return;
    }
    setError(undefined);
    setBusy(true);
    try {
      onSaved(await api<Key>('PATCH', `${base}/${encodeURIComponent(keyRecord.id)}`, body));
    } catch (caught) {
      setError(messageOf(caught));
      setBusy(false);
    }
  };

  return (
    <Dialog title={`Edit ${keyRecord.name}`} onClose={onClose} wide>
      <form onSubmit={submit} noValidate>
        <KeyFields
          idPrefix="edit-key"
          draft={draft}
          onChange={setDraft}
          ceilings={ceilings}
          tools={base === '/admin/keys'}
          cacheCap={
            cacheCap !== undefined
              ? cacheCap
              : keyRecord.account_id === account?.id
                ? account.cache_max_ttl_s
                : undefined
          }
        />
        <ErrorMessage message={error} />
        <DialogFormActions onCancel={onClose} busy={busy} submit="Save" />
      </form>
    </Dialog>
  );
}

function RevokeDialog({
  keyRecord,
  onClose,
  onRevoked,
  base = '/keys',
}: {
  keyRecord: Key;
  onClose: () => void;
  onRevoked: () => void;
  base?: KeysBase;
}) {
  return (
    <ConfirmDialog
      title="Revoke this key?"
      confirm="Revoke key"
      onClose={onClose}
      onConfirm={async () => {
        await api('DELETE', `${base}/${encodeURIComponent(keyRecord.id)}`);
        onRevoked();
      }}
    >
      <strong>{keyRecord.name}</strong> (<span class="mono">{keyRecord.hint}</span>) stops working at once for every app
      that uses it. This cannot be undone.
    </ConfirmDialog>
  );
}

/** A key's spend against its limit, with a meter while it has one. */
function Spend({ keyRecord }: { keyRecord: Key }) {
  const share = keyRecord.limit_usd ? Math.min(1, keyRecord.spent_usd / keyRecord.limit_usd) : undefined;
  return (
    <span class="key-spend">
      <span class="nowrap">{money(keyRecord.spent_usd)}</span>{' '}
      <span class="muted nowrap">/ {keyRecord.limit_usd == null ? 'no limit' : money(keyRecord.limit_usd)}</span>
      <AdminSet value={keyRecord.admin_limits?.limit_usd} />
      {share !== undefined && (
        <span class={`meter ${share >= 0.9 ? 'meter-high' : ''}`} aria-hidden="true">
          <span class="meter-fill" style={{ width: `${Math.round(share * 100)}%` }} />
        </span>
      )}
      {keyRecord.budget_usd !== null && keyRecord.budget_period !== null && (
        <span
          class="cell-sub muted nowrap"
          title={keyRecord.budget_resets_at ? `Resets at ${keyRecord.budget_resets_at}` : undefined}
        >
          {money(keyRecord.budget_spent_usd ?? 0)} / {money(keyRecord.budget_usd)}{' '}
          {budgetPeriodNames[keyRecord.budget_period]}
        </span>
      )}
    </span>
  );
}

/** The periods a key's budget may have, as its form names them. */
const budgetPeriods: BudgetPeriod[] = ['day', 'week', 'month'];
const budgetPeriodLabels: Record<BudgetPeriod, string> = { day: 'Daily', week: 'Weekly', month: 'Monthly' };

/** A key's budget per period, as its spend line says it. */
const budgetPeriodNames = { day: 'today', week: 'this week', month: 'this month' } as const;

/** A key's rate limits and models in one short line: only what it limits ("60 RPM · gpt-4o-mini"), else nothing. */
function LimitLine({ keyRecord: key }: { keyRecord: Key }) {
  const admin = key.admin_limits;
  const parts: Array<{ id: string; text: string; admin: unknown; title?: string }> = [];
  if (key.rpm != null) parts.push({ id: 'rpm', text: `${key.rpm.toLocaleString()} RPM`, admin: admin?.rpm });
  if (key.tpm != null) parts.push({ id: 'tpm', text: `${key.tpm.toLocaleString()} TPM`, admin: admin?.tpm });
  if (key.models?.length) {
    parts.push({
      id: 'models',
      text: key.models.length === 1 ? key.models[0]! : `${key.models.length} models`,
      admin: admin?.models,
      title: key.models.join(', '),
    });
  }
  if (parts.length === 0) return null;
  return (
    <span class="cell-sub muted key-limit-line">
      {parts.map((part, i) => (
        <Fragment key={part.id}>
          {i > 0 && ' · '}
          <span class="nowrap" title={part.title}>
            {part.text}
            <AdminSet value={part.admin} />
          </span>
        </Fragment>
      ))}
    </span>
  );
}

/**
 * What a key's row says of the response cache, read against its account's cap (`cap`: 0, never cached; null, no
 * cap; undefined, not known here): caching off for the account whatever the key names, else the key's default TTL
 * (and the cap, where that holds it shorter). Nothing for a key without one in an account that caches.
 */
export function keyCacheText(key: Key, cap: number | null | undefined): string | undefined {
  if (cap === 0) return 'Cache: off for this account';
  if (!key.cache_ttl_s) return undefined;
  const ttl = `Cache TTL: ${key.cache_ttl_s.toLocaleString()} s`;
  return cap != null && key.cache_ttl_s > cap ? `${ttl} (account cap ${cap.toLocaleString()} s)` : ttl;
}

/** A key's state: revoked (here, just now), expired, or active (until its expiry, where it has one). */
function KeyStatus({ keyRecord: key, revoked }: { keyRecord: Key; revoked: boolean }) {
  if (revoked) return <span class="badge badge-danger">Revoked</span>;
  const at = key.expires_at;
  if (at != null && at * 1000 <= Date.now()) {
    return (
      <>
        <span class="badge badge-danger">Expired</span>
        <span class="cell-sub muted nowrap">{shortDate(at)}</span>
      </>
    );
  }
  return (
    <>
      <span class="badge badge-ok">Active</span>
      {at != null && (
        <span class="cell-sub muted">
          Expires {shortDate(at)}
          <AdminSet value={key.admin_limits?.expires_at} />
        </span>
      )}
    </>
  );
}

/** What a key table needs beyond its rows: each key's account's cache cap, the keys revoked here, its buttons. */
export interface KeyTableOptions {
  capOf: (key: Key) => number | null | undefined;
  revoked?: ReadonlySet<string>;
  onEdit: (key: Key) => void;
  onRevoke: (key: Key) => void;
  /** A "Made by" column: in a team, where the keys are several people's. */
  madeBy?: boolean;
}

/**
 * A key's columns as every key table shows them. In sight at 1280 px beside the sidebar: its name (with what the
 * cache does for it under it), its status (Expired, whatever the width), its limits in short, and Edit and Revoke;
 * its hint and last use where the window is wide; when it was made and its whole list of models in its details.
 * On a phone, a card a key.
 */
export function keyColumns({ capOf, revoked, onEdit, onRevoke, madeBy }: KeyTableOptions): Column<Key>[] {
  const isRevoked = (key: Key) => revoked?.has(key.id) ?? false;
  const columns: Array<Column<Key> | false | undefined> = [
    {
      id: 'name',
      label: 'Name',
      lead: true,
      class: 'cell-strong key-name-cell',
      title: (key) => key.name,
      cell: (key) => {
        const cache = keyCacheText(key, capOf(key));
        return (
          <>
            <span class="key-name">{key.name}</span>
            {cache && <span class="cell-sub muted key-cache">{cache}</span>}
          </>
        );
      },
    },
    {
      id: 'status',
      label: 'Status',
      headerClass: 'kt-status',
      class: 'key-status-cell',
      title: (key) => (key.expires_at == null ? undefined : `Expires ${dateTime(key.expires_at)}`),
      cell: (key) => <KeyStatus keyRecord={key} revoked={isRevoked(key)} />,
    },
    {
      id: 'limits',
      headerClass: 'kt-limits',
      label: 'Spent / limits',
      class: 'spend-cell key-limits-cell',
      cell: (key) => (
        <>
          <Spend keyRecord={key} />
          <LimitLine keyRecord={key} />
        </>
      ),
    },
    madeBy && {
      id: 'made-by',
      label: 'Made by',
      priority: 'wide',
      class: 'key-made-by-cell',
      title: (key) => key.created_by?.email || undefined,
      cell: (key) =>
        key.created_by ? key.created_by.name || key.created_by.email : <span class="muted">Not in the console</span>,
    },
    {
      id: 'hint',
      label: 'Key',
      headerClass: 'kt-hint',
      priority: 'wide',
      class: 'mono nowrap',
      cell: (key) => key.hint,
    },
    {
      id: 'last-used',
      headerClass: 'kt-used',
      label: 'Last used',
      priority: 'wide',
      class: 'nowrap',
      title: (key) => (key.last_used_at == null ? undefined : dateTime(key.last_used_at)),
      cell: (key) => (key.last_used_at == null ? <span class="muted">Never</span> : ago(key.last_used_at)),
    },
    { id: 'created', label: 'Created', priority: 'detail', cell: (key) => dateTime(key.created) },
    {
      id: 'models',
      label: 'Models',
      priority: 'detail',
      class: 'key-models-detail',
      cell: (key) => (key.models?.length ? key.models.join(', ') : 'All models'),
    },
    {
      id: 'expires',
      label: 'Expires',
      priority: 'detail',
      cell: (key) => (key.expires_at == null ? 'Never' : dateTime(key.expires_at)),
    },
    {
      id: 'actions',
      label: 'Actions',
      hideLabel: true,
      actions: true,
      class: 'row-actions',
      headerClass: 'kt-actions',
      cell: (key) =>
        isRevoked(key) ? null : (
          <>
            <button type="button" class="button button-secondary button-small" onClick={() => onEdit(key)}>
              Edit
            </button>
            <button type="button" class="button button-ghost-danger button-small" onClick={() => onRevoke(key)}>
              Revoke
            </button>
          </>
        ),
    },
  ];
  return columns.filter((column): column is Column<Key> => !!column);
}

/**
 * A mark beside a limit an administrator set: the member may lower it, not lift it. What it means is said under the
 * table (AdminSetNote).
 */
function AdminSet({ value }: { value: unknown }) {
  if (value === null || value === undefined) return null;
  return (
    <span
      class="badge badge-cap key-admin-chip"
      title="Set by an administrator: you can lower it, not raise or remove it"
    >
      admin
    </span>
  );
}

/** Whether any of the keys has a limit an administrator set (a chip in its row). */
export function hasAdminLimits(keys: readonly Key[] | undefined): boolean {
  return !!keys?.some(
    (key) => key.admin_limits && Object.values(key.admin_limits).some((value) => value !== null && value !== undefined),
  );
}

/** The legend of the "admin" chips, under a table that shows any. */
export function AdminSetNote() {
  return (
    <p class="key-table-note muted small">
      <span class="badge badge-cap">admin</span> beside a limit: an administrator set it. The key’s account can lower
      it, not raise or remove it.
    </p>
  );
}

/**
 * A key's account as the admin's tables name it: its email, else its name (the default account's is "Default"), else
 * its id.
 */
export function ownerOf(key: Key): string {
  return (
    key.account_email || key.account_name || (key.account_id === defaultAccountId ? 'Default' : key.account_id) || '—'
  );
}

/** The dialogs a key table opens (Edit, Revoke), as the member's Keys page and the admin's All keys use them. */
export { EditKeyDialog, RevokeDialog, type KeysBase };

/** A row's key as an element id. */
const idFor = (text: string) => text.replace(/[^A-Za-z0-9_-]/g, '_');

/** The keys of several accounts, by account: its keys' table a group, under a heading that names the account. */
interface AccountGroup {
  accountId: string;
  owner: string;
  /** The Default account: the command line's keys (it has a name, no email). */
  system: boolean;
  /** A team's account (a name, no email). */
  team: boolean;
  keys: Key[];
}

function groupByAccount(keys: readonly Key[]): AccountGroup[] {
  const groups = new Map<string, AccountGroup>();
  for (const key of keys) {
    const group = groups.get(key.account_id) ?? {
      accountId: key.account_id,
      owner: ownerOf(key),
      system: key.account_id === defaultAccountId,
      team: key.account_kind === 'team',
      keys: [],
    };
    group.keys.push(key);
    groups.set(key.account_id, group);
  }
  // People's accounts by email, the system's (the command line's keys) last.
  return [...groups.values()].sort((a, b) => Number(a.system) - Number(b.system) || a.owner.localeCompare(b.owner));
}

/**
 * Every key of several accounts (an admin's lists): a heading per account (its email, else its name, "Default"),
 * under it the account's keys in the key table every page uses, with Edit and Revoke on each row.
 */
export function AccountKeyGroups({
  keys,
  idPrefix,
  options,
  skeletonRows = 2,
  empty,
}: {
  keys: readonly Key[] | undefined;
  idPrefix: string;
  options: KeyTableOptions;
  skeletonRows?: number;
  empty: string;
}) {
  if (!keys)
    return (
      <DataTable
        label="Keys"
        class="table-compact key-table"
        columns={keyColumns(options)}
        rows={undefined}
        rowKey={(key) => key.id}
        skeletonRows={skeletonRows}
        empty={empty}
      />
    );
  if (keys.length === 0)
    return (
      <DataTable
        label="Keys"
        class="table-compact key-table"
        columns={keyColumns(options)}
        rows={[]}
        rowKey={(key) => key.id}
        empty={empty}
      />
    );
  const groups = groupByAccount(keys);
  return (
    <>
      {groups.map((group) => {
        const heading = `${idPrefix}-${idFor(group.accountId)}`;
        const live = group.keys.filter((key) => !options.revoked?.has(key.id)).length;
        return (
          <div class="key-group" key={group.accountId}>
            <div class="key-group-head">
              <h3 id={heading} class="key-group-title" title={group.owner}>
                {group.owner}
              </h3>
              <span class="muted small key-group-count">
                {group.system ? 'System account · ' : group.team ? 'Team · ' : ''}
                {live} key{live === 1 ? '' : 's'}
              </span>
            </div>
            <DataTable
              labelledBy={heading}
              class="table-compact key-table"
              columns={keyColumns(options)}
              rows={group.keys}
              rowKey={(key) => key.id}
              empty={empty}
            />
          </div>
        );
      })}
      {hasAdminLimits(keys) && <AdminSetNote />}
    </>
  );
}

export function KeysPage() {
  useTitle('Keys');
  const me = useAccount();
  const team = useTeam();
  const admin = me.role === 'admin';
  const keys = useApi<List<Key>>('/keys');
  // An admin sees every key: the others' below its own (the CLI's keys are the Default account's).
  const all = useApi<List<Key>>(admin ? '/admin/keys' : null);
  const [created, setCreated] = useState<CreatedKey | undefined>(undefined);
  const [creating, setCreating] = useState(false);
  const [editing, setEditing] = useState<{ key: Key; base: KeysBase } | undefined>(undefined);
  const [revoking, setRevoking] = useState<{ key: Key; base: KeysBase } | undefined>(undefined);
  // Keys revoked on this page: shown as revoked, without buttons, until the page is read again.
  const [revoked, setRevoked] = useState<ReadonlySet<string>>(() => new Set());
  const [status, setStatus] = useState<string | undefined>(undefined);

  const list = keys.data?.data;
  const others = all.data?.data.filter((key) => key.account_id !== me.id && key.account_id !== team.id);
  // In a team the keys are several people's; in one's own account they are one's own, unless others were let in.
  const inTeam = team.id !== me.id;
  const madeBy = inTeam || !!list?.some((key) => key.created_by && key.created_by.id !== me.id);
  const heading = !inTeam
    ? 'Your keys'
    : team.role === 'owner'
      ? `Keys of ${teamName(team, me.id)}`
      : `Your keys in ${teamName(team, me.id)}`;
  const othersLive = others?.filter((key) => !revoked.has(key.id)).length;
  const live = list?.filter((key) => !revoked.has(key.id)).length;
  const options = (base: KeysBase, capOf: KeyTableOptions['capOf']): KeyTableOptions => ({
    capOf,
    revoked,
    onEdit: (key) => setEditing({ key, base }),
    onRevoke: (key) => setRevoking({ key, base }),
    madeBy: base === '/keys' && madeBy,
  });
  return (
    <>
      <PageHeader
        title="Keys"
        description="API keys for the OpenAI-compatible endpoint. Each key can have its own spend limit, rate limits, models and expiry."
      />
      <section aria-labelledby="keys-heading" class="section">
        <div class="section-head">
          <h2 id="keys-heading">{heading}</h2>
          <span class="muted">{live !== undefined ? `${live} key${live === 1 ? '' : 's'}` : '\u00a0'}</span>
          <button type="button" class="button button-primary section-action" onClick={() => setCreating(true)}>
            New key
          </button>
        </div>
        <StatusMessage message={status} />
        <ErrorMessage message={keys.error} />
        <DataTable
          labelledBy="keys-heading"
          class="table-compact key-table"
          columns={keyColumns(options('/keys', () => me.cache_max_ttl_s))}
          rows={list}
          rowKey={(key) => key.id}
          skeletonRows={3}
          empty={
            admin
              ? 'No keys of your own yet. Every other account’s keys, the command line’s among them, are below.'
              : 'No keys yet. Make one with “New key” to call the API.'
          }
        />
        {hasAdminLimits(list) && <AdminSetNote />}
      </section>
      {/* Once the admin's own keys are in: drawn before, it would jump down the page as they came. */}
      {admin && (list || keys.error) && (
        <section aria-labelledby="other-keys-heading" class="section">
          <div class="section-head">
            <h2 id="other-keys-heading">Other accounts’ keys</h2>
            <span class="muted">
              {othersLive !== undefined ? `${othersLive} key${othersLive === 1 ? '' : 's'}` : '\u00a0'}
            </span>
          </div>
          <p class="section-note muted small">
            Keys made with <code>npm run keys -- create</code> belong to the Default account unless{' '}
            <code>--account</code> names another.
          </p>
          <ErrorMessage message={all.error} />
          <AccountKeyGroups
            keys={others}
            idPrefix="other-keys"
            options={options('/admin/keys', (key) => key.account_cache_max_ttl_s)}
            empty="No other account has a key."
          />
        </section>
      )}
      {creating && (
        <CreateKeyDialog
          onClose={() => setCreating(false)}
          onCreated={(key) => {
            const { key: _secret, ...record } = key;
            keys.setData((previous) => previous && { ...previous, data: [...previous.data, record] });
            setStatus(`Key “${key.name}” created.`);
            setCreating(false);
            setCreated(key);
          }}
        />
      )}
      {created && <SecretDialog created={created} onClose={() => setCreated(undefined)} />}
      {editing && (
        <EditKeyDialog
          keyRecord={editing.key}
          base={editing.base}
          cacheCap={editing.base === '/keys' ? me.cache_max_ttl_s : editing.key.account_cache_max_ttl_s}
          onClose={() => setEditing(undefined)}
          onSaved={(saved) => {
            const keep = (previous: List<Key> | undefined) =>
              previous && { ...previous, data: previous.data.map((k) => (k.id === saved.id ? { ...k, ...saved } : k)) };
            keys.setData(keep);
            all.setData(keep);
            setEditing(undefined);
            setStatus(`Key “${saved.name}” saved.`);
          }}
        />
      )}
      {revoking && (
        <RevokeDialog
          keyRecord={revoking.key}
          base={revoking.base}
          onClose={() => setRevoking(undefined)}
          onRevoked={() => {
            setRevoked((previous) => new Set(previous).add(revoking.key.id));
            setStatus(`Key “${revoking.key.name}” revoked.`);
            setRevoking(undefined);
          }}
        />
      )}
    </>
  );
}
