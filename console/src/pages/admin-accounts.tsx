import type { ComponentChildren, TargetedSubmitEvent } from 'preact';
import { useState } from 'preact/hooks';
import { api, listOf, messageOf } from '../api';
import { useApp } from '../app-context';
import { type Column, TableSection } from '../components/data-table';
import {
  Dialog,
  DialogFormActions,
  ErrorMessage,
  FormCard,
  InputField,
  PageHeader,
  useApi,
  useSending,
  useTitle,
} from '../components/ui';
import { balance, dateTime, money } from '../format';
import { defaultAccountId, serviceTiers, type Account, type AccountList, type Role, type ServiceTier } from '../types';
import { parseToolPatterns } from '../tool-patterns';

/** An account as dialogs and messages name it: its email, else its name (the Default account's). */
const accountLabel = (account: Account) => account.email || account.name || account.id;

function CreateAccountForm({ onCreated }: { onCreated: (account: Account) => void }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [name, setName] = useState('');
  const [role, setRole] = useState<Role>('member');
  const { busy, error, setError, send } = useSending();

  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (!email.trim()) return setError('Enter the email address of the new account.');
    if (password && password.length < 8)
      return setError('The password must have at least 8 characters (or leave it empty).');
    void send(async () => {
      const body: Record<string, unknown> = { email: email.trim(), role };
      if (password) body.password = password;
      if (name.trim()) body.name = name.trim();
      const account = await api<Account>('POST', '/admin/accounts', body);
      setEmail('');
      setPassword('');
      setName('');
      setRole('member');
      onCreated(account);
    });
  };

  return (
    <FormCard
      id="create-account-heading"
      title="New account"
      onSubmit={submit}
      error={error}
      busy={busy}
      submit="Create account"
    >
      <InputField id="account-email" label="Email" type="email" required value={email} onValue={setEmail} />
      <InputField
        id="account-password"
        label="Password"
        type="password"
        minLength={8}
        value={password}
        onValue={setPassword}
        autoComplete="new-password"
        hint="8+ characters. Empty: the account cannot sign in yet."
      />
      <InputField id="account-name" label="Name" type="text" value={name} onValue={setName} />
      <div class="field">
        <label for="account-role">Role</label>
        <select id="account-role" value={role} onChange={(e) => setRole(e.currentTarget.value as Role)}>
          <option value="member">Member</option>
          <option value="admin">Admin</option>
        </select>
      </div>
    </FormCard>
  );
}

function CreditDialog({
  account,
  onClose,
  onCredited,
}: {
  account: Account;
  onClose: () => void;
  onCredited: (balanceUsd: number) => void;
}) {
  const [amount, setAmount] = useState('');
  const [note, setNote] = useState('');
  const { busy, error, setError, send } = useSending();
  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    const value = Number(amount);
    if (amount.trim() === '' || !Number.isFinite(value) || value === 0)
      return setError('Enter an amount in USD (negative to correct a balance).');
    void send(async () => {
      const answer = await api<{ account_id: string; balance_usd: number }>(
        'POST',
        `/admin/accounts/${encodeURIComponent(account.id)}/credits`,
        {
          amount_usd: value,
          ...(note.trim() ? { note: note.trim() } : {}),
        },
      );
      onCredited(answer.balance_usd);
    });
  };
  return (
    <Dialog title={`Add credit to ${accountLabel(account)}`} onClose={onClose}>
      <p class="dialog-lead">
        Current balance: <strong>{balance(account.balance_usd)}</strong>
      </p>
      <form onSubmit={submit} noValidate>
        <div class="form-stack">
          <div class="field">
            <label for="credit-amount">Amount (USD)</label>
            <input
              id="credit-amount"
              type="number"
              step="any"
              inputMode="decimal"
              required
              value={amount}
              onInput={(e) => setAmount(e.currentTarget.value)}
              autoFocus
            />
          </div>
          <div class="field">
            <label for="credit-note">Note</label>
            <input
              id="credit-note"
              type="text"
              maxLength={1000}
              value={note}
              onInput={(e) => setNote(e.currentTarget.value)}
              placeholder="e.g. Invoice 2024-017"
            />
          </div>
        </div>
        <ErrorMessage message={error} />
        <DialogFormActions onCancel={onClose} busy={busy} submit="Credit" />
      </form>
    </Dialog>
  );
}

/**
 * A dialog's change to one account: `change` reads its form into the fields to PATCH, or the message of what is
 * wrong with it; the saved account goes to `onSaved`, a refusal to the dialog's error.
 */
function useAccountChange(
  account: Account,
  onSaved: (updated: Account) => void,
  change: () => Record<string, unknown> | string,
) {
  const { busy, error, setError, send } = useSending();
  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    const fields = change();
    if (typeof fields === 'string') return setError(fields);
    void send(async () =>
      onSaved(await api<Account>('PATCH', `/admin/accounts/${encodeURIComponent(account.id)}`, fields)),
    );
  };
  return { error, busy, submit };
}

/** What each dialog that changes one setting of an account is given: the account, and what closes or saves it. */
interface AccountDialogProps {
  account: Account;
  onClose: () => void;
  onSaved: (updated: Account) => void;
}

/** The dialog of one account setting: its lead, its fields, and Save (a refusal said above the buttons). */
function SettingDialog({
  title,
  lead,
  form,
  onClose,
  children,
}: {
  title: string;
  lead: ComponentChildren;
  form: ReturnType<typeof useAccountChange>;
  onClose: () => void;
  children: ComponentChildren;
}) {
  return (
    <Dialog title={title} onClose={onClose}>
      <p class="dialog-lead">{lead}</p>
      <form onSubmit={form.submit} noValidate>
        <div class="form-stack">{children}</div>
        <ErrorMessage message={form.error} />
        <DialogFormActions onCancel={onClose} busy={form.busy} submit="Save" />
      </form>
    </Dialog>
  );
}

function WeightDialog({ account, onClose, onSaved }: AccountDialogProps) {
  const [weight, setWeight] = useState(String(account.weight));
  const form = useAccountChange(account, onSaved, () => {
    const value = Number(weight);
    return Number.isInteger(value) && value >= 1 && value <= 100
      ? { weight: value }
      : 'Enter a whole number from 1 to 100.';
  });
  return (
    <SettingDialog
      title={`Weight of ${accountLabel(account)}`}
      lead={
        <>
          When requests wait for a vendor, each account waiting gets its weight's share of what is free: an account of
          weight 3 is served three times as much as one of weight 1. Every account starts at 1.
        </>
      }
      form={form}
      onClose={onClose}
    >
      <div class="field">
        <label for="account-weight">Weight (1–100)</label>
        <input
          id="account-weight"
          type="number"
          min={1}
          max={100}
          step={1}
          inputMode="numeric"
          required
          value={weight}
          onInput={(e) => setWeight(e.currentTarget.value)}
          autoFocus
        />
      </div>
    </SettingDialog>
  );
}

/** The most seconds an account's cache cap may name (a year; the API's bound). */
const maxCacheTtlS = 31_536_000;
/** What an account's row says of its cache cap: no cap of its own, off (never cached), or its seconds. */
const cacheCapText = (cap: number | null) =>
  cap === null ? 'no cap' : cap === 0 ? 'off' : `${cap.toLocaleString()} s`;
/** The same as the row's button reads it. */
const cacheCapLine = (cap: number | null) =>
  cap === null ? 'Cache: no cap' : cap === 0 ? 'Cache: off (never cached)' : `Cache: at most ${cap.toLocaleString()} s`;

function CacheCapDialog({
  account,
  gatewayCap,
  onClose,
  onSaved,
}: AccountDialogProps & {
  gatewayCap: number | undefined;
}) {
  const [cap, setCap] = useState(account.cache_max_ttl_s === null ? '' : String(account.cache_max_ttl_s));
  const form = useAccountChange(account, onSaved, () => {
    const text = cap.trim();
    const value = text === '' ? null : Number(text);
    if (value !== null && (!Number.isInteger(value) || value < 0 || value > maxCacheTtlS))
      return `Enter a whole number of seconds from 0 to ${maxCacheTtlS.toLocaleString()}, or leave it empty.`;
    return { cache_max_ttl_s: value };
  });
  return (
    <SettingDialog
      title={`Cache cap of ${accountLabel(account)}`}
      lead={
        <>
          The longest this account’s answers are kept in the response cache, whatever <code>max-age</code> its requests
          or its keys’ default TTL name. 0 turns caching off for the account.
        </>
      }
      form={form}
      onClose={onClose}
    >
      <div class="field">
        <label for="account-cache-cap">Cache cap (s)</label>
        <input
          id="account-cache-cap"
          type="number"
          min={0}
          max={maxCacheTtlS}
          step={1}
          inputMode="numeric"
          value={cap}
          onInput={(e) => setCap(e.currentTarget.value)}
          placeholder="No cap"
          aria-describedby="account-cache-cap-hint"
          autoFocus
        />
        <p class="field-hint" id="account-cache-cap-hint">
          Empty: no cap of its own
          {gatewayCap === undefined ? '' : ` (the gateway’s ${gatewayCap.toLocaleString()} s still holds)`}. 0: never
          cached.
        </p>
      </div>
    </SettingDialog>
  );
}

/** What an account's row says of the MCP tools its keys may use: every tool, none, or its patterns. */
const toolsLine = (tools: readonly string[] | null) =>
  tools === null ? 'Tools: every' : tools.length === 0 ? 'Tools: none' : `Tools: ${tools.join(', ')}`;

function ToolsDialog({ account, onClose, onSaved }: AccountDialogProps) {
  const [every, setEvery] = useState(account.mcp_tools === null);
  const [patterns, setPatterns] = useState(account.mcp_tools?.join(', ') ?? '');
  const form = useAccountChange(account, onSaved, () => {
    if (every) return { mcp_tools: null };
    const tools = parseToolPatterns(patterns);
    return typeof tools === 'string' ? tools : { mcp_tools: tools };
  });
  return (
    <SettingDialog
      title={`MCP tools of ${accountLabel(account)}`}
      lead={
        <>
          The tools of the MCP servers this account’s keys may use through /mcp. A key may be narrowed further on All
          keys.
        </>
      }
      form={form}
      onClose={onClose}
    >
      <div class="check">
        <input
          id="account-tools-every"
          type="checkbox"
          checked={every}
          onChange={(e) => setEvery(e.currentTarget.checked)}
          autoFocus
        />
        <label for="account-tools-every">Every tool</label>
      </div>
      <div class="field">
        <label for="account-tools">Only these tools</label>
        <input
          id="account-tools"
          type="text"
          value={patterns}
          disabled={every}
          onInput={(e) => setPatterns(e.currentTarget.value)}
          placeholder="None"
          autoComplete="off"
          spellcheck={false}
          aria-describedby="account-tools-hint"
        />
        <p class="field-hint" id="account-tools-hint">
          server/tool patterns, comma separated, e.g. notes/*, github/create_issue. Empty: no tools at all.
        </p>
      </div>
    </SettingDialog>
  );
}

const tierLabel = (tier: ServiceTier) => tier[0]!.toUpperCase() + tier.slice(1);
const tierHints: Record<ServiceTier, string> = {
  priority: 'served before anything else waiting',
  default: 'served after priority',
  flex: 'served only with capacity nothing else wants',
};
/** What an account's row says of its tiers. */
const tiersText = (tiers: ServiceTier[] | null) => (tiers ? tiers.map(tierLabel).join(', ') : 'gateway default');

function TiersDialog({
  account,
  defaults,
  onClose,
  onSaved,
}: AccountDialogProps & {
  defaults: ServiceTier[] | undefined;
}) {
  const [useDefault, setUseDefault] = useState(account.service_tiers === null);
  // Unticking "the gateway's default" starts from what the account has now.
  const [chosen, setChosen] = useState<ServiceTier[]>(account.service_tiers ?? defaults ?? ['default']);
  const toggle = (tier: ServiceTier, on: boolean) =>
    setChosen((previous) => serviceTiers.filter((t) => (t === tier ? on : previous.includes(t))));
  const { error, busy, submit } = useAccountChange(account, onSaved, () =>
    !useDefault && chosen.length === 0
      ? 'Choose at least one tier, or use the gateway’s default.'
      : { service_tiers: useDefault ? null : chosen },
  );
  return (
    <Dialog title={`Service tiers of ${accountLabel(account)}`} onClose={onClose}>
      <p class="dialog-lead">
        The service tiers this account’s requests may ask for with <code>service_tier</code>. Unless set here, an
        account has the gateway’s default.
      </p>
      <form onSubmit={submit} noValidate>
        <div class="form-stack">
          <div class="check">
            <input
              id="tiers-default"
              type="checkbox"
              checked={useDefault}
              onChange={(e) => setUseDefault(e.currentTarget.checked)}
              aria-describedby={defaults ? 'tiers-default-hint' : undefined}
              autoFocus
            />
            <label for="tiers-default">Use the gateway’s default</label>
            {defaults && (
              <span class="check-hint" id="tiers-default-hint">
                Now: {defaults.map(tierLabel).join(', ')}.
              </span>
            )}
          </div>
          <fieldset class="check-group" disabled={useDefault}>
            <legend>Tiers this account may use</legend>
            {serviceTiers.map((tier) => (
              <div class="check" key={tier}>
                <input
                  id={`tier-${tier}`}
                  type="checkbox"
                  checked={useDefault ? (defaults ?? []).includes(tier) : chosen.includes(tier)}
                  onChange={(e) => toggle(tier, e.currentTarget.checked)}
                  aria-describedby={`tier-${tier}-hint`}
                />
                <label for={`tier-${tier}`}>{tierLabel(tier)}</label>
                <span class="check-hint" id={`tier-${tier}-hint`}>
                  {tierHints[tier]}
                </span>
              </div>
            ))}
          </fieldset>
        </div>
        <ErrorMessage message={error} />
        <DialogFormActions onCancel={onClose} busy={busy} submit="Save" />
      </form>
    </Dialog>
  );
}

export function AccountsPage() {
  useTitle('Accounts');
  const { account: me, refreshAccount } = useApp();
  const accounts = useApi<AccountList | Account[]>('/admin/accounts');
  const [crediting, setCrediting] = useState<Account | undefined>(undefined);
  const [weighing, setWeighing] = useState<Account | undefined>(undefined);
  const [tiering, setTiering] = useState<Account | undefined>(undefined);
  const [capping, setCapping] = useState<Account | undefined>(undefined);
  const [tooling, setTooling] = useState<Account | undefined>(undefined);
  const [disabling, setDisabling] = useState<Account | undefined>(undefined);
  const [busyId, setBusyId] = useState<string | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [status, setStatus] = useState<string | undefined>(undefined);
  const list = accounts.data ? listOf(accounts.data) : undefined;
  const defaultTiers = accounts.data && !Array.isArray(accounts.data) ? accounts.data.default_service_tiers : undefined;
  const gatewayCacheCap =
    accounts.data && !Array.isArray(accounts.data) ? accounts.data.gateway_cache_max_ttl_s : undefined;

  // The list's own fields (the default tiers) are kept through a change of its accounts.
  const change = (update: (list: Account[]) => Account[]) =>
    accounts.setData(
      (previous) =>
        previous && (Array.isArray(previous) ? update(previous) : { ...previous, data: update(previous.data) }),
    );
  const replace = (updated: Account) => change((list) => list.map((a) => (a.id === updated.id ? updated : a)));
  /** A settings dialog's saving: the account's row replaced, what it is now said, and the dialog (`close`) closed. */
  const saved = (close: (none: undefined) => void, say: (account: Account) => string) => (updated: Account) => {
    replace(updated);
    setStatus(say(updated));
    close(undefined);
  };

  const toggle = async (account: Account) => {
    setBusyId(account.id);
    setError(undefined);
    try {
      const updated = await api<Account>('PATCH', `/admin/accounts/${encodeURIComponent(account.id)}`, {
        disabled: !account.disabled,
      });
      replace(updated);
      setStatus(`${accountLabel(updated)} ${updated.disabled ? 'disabled' : 'enabled'}.`);
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setBusyId(undefined);
    }
  };

  /*
   * In sight at 1280 px beside the sidebar: who (the email, cut short, whole in its tooltip), role and status, balance,
   * how it is served (weight, tiers, cache cap: a line each), and its buttons whole; its name and when it was made in
   * its details. On a phone, a card an account.
   */
  const columns: Column<Account>[] = [
    {
      id: 'email',
      label: 'Email',
      lead: true,
      class: 'cell-strong account-email-cell',
      title: (account) => account.email || undefined,
      cell: (account) => (
        <>
          <span class="account-email-line">
            {account.email ? (
              <span class="account-email">{account.email}</span>
            ) : account.kind === 'team' ? (
              // A team has a name, no email: its people sign in with theirs.
              <span class="account-email">{account.name}</span>
            ) : (
              // The Default account has no email: it is the system's (the command line's keys), named by its name.
              <span class="muted account-email">{account.name || 'Default'} (system account)</span>
            )}
            {me?.id === account.id && <span class="badge account-you">You</span>}
          </span>
        </>
      ),
    },
    {
      id: 'role',
      label: 'Role',
      class: 'account-role-cell',
      cell: (account) => (
        <span class="account-badges">
          {account.id === defaultAccountId ? (
            <span class="badge" title="Keys made without an account belong to it">
              System
            </span>
          ) : account.kind === 'team' ? (
            <span class="badge" title="A team: its members spend its balance through their keys">
              Team
            </span>
          ) : (
            <span class={`badge ${account.role === 'admin' ? 'badge-accent' : ''}`}>
              {account.role === 'admin' ? 'Admin' : 'Member'}
            </span>
          )}
          {account.disabled ? (
            <span class="badge badge-danger">Disabled</span>
          ) : (
            <span class="badge badge-ok">Active</span>
          )}
        </span>
      ),
    },
    {
      id: 'balance',
      label: 'Balance',
      numeric: true,
      class: 'nowrap',
      cell: (account) => balance(account.balance_usd),
    },
    {
      id: 'serving',
      label: 'Serving',
      class: 'account-serving-cell',
      cell: (account) => (
        <>
          {/* Its weight: its share of contended capacity against other accounts' (1 unless an admin set it). */}
          <button
            type="button"
            class="weight-button tiers-button account-setting"
            onClick={() => setWeighing(account)}
            aria-label={`Change weight, now ${account.weight}`}
            title="Its fair share when requests wait for a vendor: weight 3 is served three times as much as weight 1"
          >
            Weight: {account.weight}
          </button>
          {/* The service tiers it may ask for (the gateway's default unless an admin set its own). */}
          <button
            type="button"
            class="weight-button tiers-button account-setting"
            onClick={() => setTiering(account)}
            aria-label={`Change service tiers, now ${account.service_tiers ? tiersText(account.service_tiers) : 'the gateway’s default'}`}
            title="Service tiers this account's requests may ask for"
          >
            Tiers: {tiersText(account.service_tiers)}
          </button>
          {/* The response cache's cap for its answers: no cap of its own, off (never cached), or so many seconds. */}
          <button
            type="button"
            class="weight-button tiers-button account-setting"
            onClick={() => setCapping(account)}
            aria-label={`Change cache cap, now ${cacheCapText(account.cache_max_ttl_s)}`}
            title="The longest this account's answers stay in the response cache"
          >
            {cacheCapLine(account.cache_max_ttl_s)}
          </button>
          {/* The MCP tools its keys may use (every tool unless an admin set a list). */}
          <button
            type="button"
            class="weight-button tiers-button account-setting"
            onClick={() => setTooling(account)}
            aria-label={`Change MCP tools, now ${toolsLine(account.mcp_tools).slice(7)}`}
            title="The MCP tools this account's keys may use"
          >
            {toolsLine(account.mcp_tools)}
          </button>
        </>
      ),
    },
    { id: 'name', label: 'Name', priority: 'detail', cell: (account) => account.name || <span class="muted">—</span> },
    { id: 'id', label: 'Account id', priority: 'detail', class: 'mono', cell: (account) => account.id },
    { id: 'created', label: 'Created', priority: 'detail', cell: (account) => dateTime(account.created) },
    {
      id: 'actions',
      label: 'Actions',
      hideLabel: true,
      actions: true,
      class: 'row-actions',
      cell: (account) => (
        <>
          {/* An unlimited account takes no credit; nobody disables their own account or the system's. */}
          {account.balance_usd !== null && (
            <button type="button" class="button button-secondary button-small" onClick={() => setCrediting(account)}>
              Add credit
            </button>
          )}
          {me?.id !== account.id && account.id !== defaultAccountId && (
            <button
              type="button"
              class={`button button-small ${account.disabled ? 'button-secondary' : 'button-ghost-danger'}`}
              onClick={() => (account.disabled ? void toggle(account) : setDisabling(account))}
              disabled={busyId === account.id}
            >
              {account.disabled ? 'Enable' : 'Disable'}
            </button>
          )}
        </>
      ),
    },
  ];
  return (
    <>
      <PageHeader title="Accounts" description="Everyone who can sign in to this console, their balances and roles." />
      <CreateAccountForm
        onCreated={(account) => {
          change((list) => [...list, account]);
          setStatus(`Account ${account.email} created.`);
        }}
      />
      <TableSection
        heading="accounts-heading"
        title="All accounts"
        count={list && `${list.length} account${list.length === 1 ? '' : 's'}`}
        status={status}
        error={error ?? accounts.error}
        onDismiss={error ? () => setError(undefined) : undefined}
        class="table-compact account-table"
        columns={columns}
        rows={list}
        rowKey={(account) => account.id}
        skeletonRows={3}
        empty="No accounts yet."
      />
      {disabling && (
        <Dialog title="Disable this account?" onClose={() => setDisabling(undefined)} alert>
          <p class="dialog-lead">
            <strong>{accountLabel(disabling)}</strong> is signed out everywhere and cannot sign in, and every one of its
            keys is refused at once. You can enable it again later.
          </p>
          <div class="dialog-actions">
            <button type="button" class="button button-secondary" onClick={() => setDisabling(undefined)} autoFocus>
              Cancel
            </button>
            <button
              type="button"
              class="button button-danger"
              onClick={() => {
                const account = disabling;
                setDisabling(undefined);
                void toggle(account);
              }}
            >
              Disable account
            </button>
          </div>
        </Dialog>
      )}
      {weighing && (
        <WeightDialog
          account={weighing}
          onClose={() => setWeighing(undefined)}
          onSaved={saved(setWeighing, (updated) => `Weight of ${accountLabel(updated)}: ${updated.weight}.`)}
        />
      )}
      {tiering && (
        <TiersDialog
          account={tiering}
          defaults={defaultTiers}
          onClose={() => setTiering(undefined)}
          onSaved={saved(
            setTiering,
            (updated) =>
              `Service tiers of ${accountLabel(updated)}: ${updated.service_tiers ? tiersText(updated.service_tiers) : 'the gateway’s default'}.`,
          )}
        />
      )}
      {capping && (
        <CacheCapDialog
          account={capping}
          gatewayCap={gatewayCacheCap}
          onClose={() => setCapping(undefined)}
          onSaved={saved(
            setCapping,
            (updated) => `Cache cap of ${accountLabel(updated)}: ${cacheCapText(updated.cache_max_ttl_s)}.`,
          )}
        />
      )}
      {tooling && (
        <ToolsDialog
          account={tooling}
          onClose={() => setTooling(undefined)}
          onSaved={saved(
            setTooling,
            (updated) => `MCP tools of ${accountLabel(updated)}: ${toolsLine(updated.mcp_tools).slice(7)}.`,
          )}
        />
      )}
      {crediting && (
        <CreditDialog
          account={crediting}
          onClose={() => setCrediting(undefined)}
          onCredited={(balanceUsd) => {
            replace({ ...crediting, balance_usd: balanceUsd });
            setStatus(`New balance of ${accountLabel(crediting)}: ${money(balanceUsd)}.`);
            setCrediting(undefined);
            if (crediting.id === me?.id) refreshAccount();
          }}
        />
      )}
    </>
  );
}
