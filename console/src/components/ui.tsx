import type { ComponentChildren, TargetedMouseEvent, TargetedSubmitEvent } from 'preact';
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { api, isAbort, messageOf } from '../api';

/** Sets the tab's title: "Keys · Switchyard". */
export function useTitle(page: string): void {
  useEffect(() => {
    document.title = `${page} · Switchyard`;
  }, [page]);
}

/** A form's sending: `busy` while its request runs, and what went wrong, said as the server said it. */
export interface Sending {
  busy: boolean;
  error: string | undefined;
  /** Says what is wrong before anything is sent (a field left empty), or clears it. */
  setError: (message: string | undefined) => void;
  /** Runs `send` unless a send is running: the error cleared first, any failure kept as the error. */
  send: (send: () => Promise<void>) => Promise<void>;
}

export function useSending(): Sending {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);
  const running = useRef(false);
  const send = useCallback(async (work: () => Promise<void>) => {
    if (running.current) return;
    running.current = true;
    setError(undefined);
    setBusy(true);
    try {
      await work();
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      running.current = false;
      setBusy(false);
    }
  }, []);
  return { busy, error, setError, send };
}

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  loading: boolean;
  reload: () => void;
  setData: (update: (previous: T | undefined) => T | undefined) => void;
}

/**
 * GETs a console API path and keeps the answer; a change of path (or reload)
 * fetches again, keeping the old data shown until the new arrives. `null`
 * fetches nothing. An optional interval refreshes it in the background.
 */
export function useApi<T>(path: string | null, refreshMs?: number): Loaded<T> {
  const [data, setDataState] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [loading, setLoading] = useState(path !== null);
  const [generation, setGeneration] = useState(0);

  useEffect(() => {
    if (path === null) return;
    const controller = new AbortController();
    let timer: number | undefined;
    const load = async (background: boolean) => {
      if (!background) setLoading(true);
      try {
        const answer = await api<T>('GET', path, undefined, { signal: controller.signal });
        if (controller.signal.aborted) return;
        setDataState(answer);
        setError(undefined);
      } catch (caught) {
        if (isAbort(caught) || controller.signal.aborted) return;
        setError(messageOf(caught));
      } finally {
        if (!controller.signal.aborted) setLoading(false);
      }
      if (refreshMs && !controller.signal.aborted) timer = window.setTimeout(() => void load(true), refreshMs);
    };
    void load(false);
    return () => {
      controller.abort();
      if (timer !== undefined) window.clearTimeout(timer);
    };
  }, [path, generation, refreshMs]);

  const reload = useCallback(() => setGeneration((g) => g + 1), []);
  const setData = useCallback((update: (previous: T | undefined) => T | undefined) => setDataState(update), []);
  return { data, error, loading, reload, setData };
}

/**
 * An error the user must see: announced by screen readers at once. `children` follow the message in its text (the
 * request it was, say), and `actions` sit beside the text (a Copy button).
 */
export function ErrorMessage({
  message,
  onDismiss,
  children,
  actions,
  class: className,
}: {
  message: string | undefined | null;
  onDismiss?: (() => void) | undefined;
  children?: ComponentChildren;
  actions?: ComponentChildren;
  class?: string;
}) {
  if (!message) return null;
  const text = (
    <span class="alert-text" role="alert">
      {message}
      {children}
    </span>
  );
  return (
    <div class={className ? `alert alert-error ${className}` : 'alert alert-error'}>
      <svg class="alert-icon" viewBox="0 0 20 20" aria-hidden="true">
        <circle cx="10" cy="10" r="8" fill="none" stroke="currentColor" stroke-width="1.6" />
        <path d="M10 5.8v5.2M10 13.6v.1" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" />
      </svg>
      {actions ? (
        <div class="alert-body">
          {text}
          {actions}
        </div>
      ) : (
        text
      )}
      {onDismiss && (
        <button type="button" class="alert-close" onClick={onDismiss} aria-label="Dismiss">
          ×
        </button>
      )}
    </div>
  );
}

/** A polite status line (success notes); always in the DOM so changes are announced. */
export function StatusMessage({ message, class: className }: { message: string | undefined | null; class?: string }) {
  return (
    <p class={`status-line ${className ?? ''}`} role="status" aria-live="polite">
      {message ? <span class="status-ok">{message}</span> : null}
    </p>
  );
}

export function PageHeader({
  title,
  description,
  actions,
}: {
  title: string;
  description?: ComponentChildren;
  actions?: ComponentChildren;
}) {
  return (
    <header class="page-header">
      <div>
        <h1 tabIndex={-1}>{title}</h1>
        {description && <p class="page-description">{description}</p>}
      </div>
      {actions && <div class="page-actions">{actions}</div>}
    </header>
  );
}

let dialogCount = 0;

interface DialogProps {
  title: string;
  onClose: () => void;
  children: ComponentChildren;
  wide?: boolean;
  /** A role of alertdialog for confirmations. */
  alert?: boolean;
}

/**
 * A modal <dialog> (focus kept inside, Escape closes, the rest of the page
 * inert). Mounted means open: the caller unmounts it to close, and focus
 * goes back to where it was.
 */
export function Dialog({ title, onClose, children, wide, alert }: DialogProps) {
  const ref = useRef<HTMLDialogElement>(null);
  const [titleId] = useState(() => `dialog-title-${++dialogCount}`);
  const closeRef = useRef(onClose);
  closeRef.current = onClose;

  useLayoutEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    if (!dialog.open) dialog.showModal();
    const onCancel = (event: Event) => {
      event.preventDefault();
      closeRef.current();
    };
    dialog.addEventListener('cancel', onCancel);
    return () => {
      dialog.removeEventListener('cancel', onCancel);
      if (dialog.open) dialog.close();
      if (opener && opener.isConnected) opener.focus();
    };
  }, []);

  const onBackdrop = (event: TargetedMouseEvent<HTMLDialogElement>) => {
    // A click on the backdrop lands on the dialog element itself, outside its box.
    if (!ref.current || event.target !== ref.current) return;
    const box = ref.current.getBoundingClientRect();
    const inside =
      event.clientX >= box.left &&
      event.clientX <= box.right &&
      event.clientY >= box.top &&
      event.clientY <= box.bottom;
    if (!inside) closeRef.current();
  };

  return (
    <dialog
      ref={ref}
      class={`dialog ${wide ? 'dialog-wide' : ''}`}
      aria-labelledby={titleId}
      role={alert ? 'alertdialog' : undefined}
      onClick={onBackdrop}
    >
      <div class="dialog-head">
        <h2 id={titleId}>{title}</h2>
        <button type="button" class="icon-button" onClick={() => closeRef.current()} aria-label="Close">
          <svg viewBox="0 0 20 20" aria-hidden="true">
            <path d="M5 5l10 10M15 5L5 15" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" />
          </svg>
        </button>
      </div>
      <div class="dialog-body">{children}</div>
    </dialog>
  );
}

export function Spinner() {
  return <span class="spinner" aria-hidden="true" />;
}

/** The icon before a button's words (Refresh, Download CSV): one line drawn with the path `d`, on a 20 by 20 grid. */
export function ButtonIcon({ d }: { d: string }) {
  return (
    <svg viewBox="0 0 20 20" aria-hidden="true" class="button-icon">
      <path d={d} fill="none" stroke="currentColor" stroke-width="1.7" stroke-linecap="round" stroke-linejoin="round" />
    </svg>
  );
}

/** A dialog form's buttons: Cancel, and its submit button (a spinner while the request is out). */
export function DialogFormActions({ onCancel, busy, submit }: { onCancel: () => void; busy: boolean; submit: string }) {
  return (
    <div class="dialog-actions">
      <button type="button" class="button button-secondary" onClick={onCancel}>
        Cancel
      </button>
      <button type="submit" class="button button-primary" disabled={busy}>
        {busy && <Spinner />}
        {submit}
      </button>
    </div>
  );
}

/**
 * Asks before what cannot be taken back (revoking a key, removing a server, deleting a batch): its lead, the way
 * back (focused first) and the danger button; `onConfirm` runs once, a failure said above the buttons.
 */
export function ConfirmDialog({
  title,
  confirm,
  cancel = 'Cancel',
  onClose,
  onConfirm,
  children,
}: {
  title: string;
  confirm: string;
  cancel?: string;
  onClose: () => void;
  onConfirm: () => Promise<void>;
  children: ComponentChildren;
}) {
  const { busy, error, send } = useSending();
  return (
    <Dialog title={title} onClose={onClose} alert>
      <p class="dialog-lead">{children}</p>
      <ErrorMessage message={error} />
      <div class="dialog-actions">
        <button type="button" class="button button-secondary" onClick={onClose} autoFocus>
          {cancel}
        </button>
        <button type="button" class="button button-danger" onClick={() => void send(onConfirm)} disabled={busy}>
          {busy && <Spinner />}
          {confirm}
        </button>
      </div>
    </Dialog>
  );
}

/** Text that changes to "Copied" a moment after a copy. */
export function useCopy(): [boolean, (text: string) => Promise<void>, string | undefined] {
  const [copied, setCopied] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);
  const timer = useRef<number | undefined>(undefined);
  useEffect(() => () => window.clearTimeout(timer.current), []);
  const copy = async (text: string) => {
    try {
      await navigator.clipboard.writeText(text);
      setError(undefined);
      setCopied(true);
      window.clearTimeout(timer.current);
      timer.current = window.setTimeout(() => setCopied(false), 2500);
    } catch {
      setError('Copying was blocked by the browser: select the text and copy it by hand.');
    }
  };
  return [copied, copy, error];
}

/** Parses an optional number field: '' → undefined, junk → NaN. */
export function optionalNumber(text: string): number | undefined {
  const trimmed = text.trim();
  if (trimmed === '') return undefined;
  return Number(trimmed);
}

export function modelList(text: string): string[] | undefined {
  const models = [
    ...new Set(
      text
        .split(',')
        .map((m) => m.trim())
        .filter(Boolean),
    ),
  ];
  return models.length ? models : undefined;
}

/** A button that copies `text`, and says so; each snippet has its own. */
export function CopyButton({ text, label, class: className }: { text: string; label: string; class?: string }) {
  const [copied, copy, copyError] = useCopy();
  return (
    <>
      <button
        type="button"
        class={className ? `button button-secondary button-small ${className}` : 'button button-secondary button-small'}
        onClick={() => void copy(text)}
        aria-label={label}
      >
        {copied ? 'Copied' : 'Copy'}
      </button>
      {copyError ? (
        <span class="visually-hidden" role="alert">
          {copyError}
        </span>
      ) : null}
    </>
  );
}

/**
 * A form in a card of its own (New account, Add member, New team): its heading, the fields, what went wrong and the
 * submit button (a spinner while the request is out). `id` names the heading; `class` is added to the card's.
 */
export function FormCard({
  id,
  title,
  class: className,
  onSubmit,
  error,
  busy,
  submit,
  children,
}: {
  id: string;
  title: string;
  class?: string;
  onSubmit: (event: TargetedSubmitEvent<HTMLFormElement>) => void;
  error: string | undefined;
  busy: boolean;
  submit: string;
  children: ComponentChildren;
}) {
  return (
    <section class={className ? `card ${className}` : 'card'} aria-labelledby={id}>
      <h2 id={id} class="card-title">
        {title}
      </h2>
      <form onSubmit={onSubmit} noValidate>
        <div class="form-grid">{children}</div>
        <ErrorMessage message={error} />
        <div class="form-actions">
          <button type="submit" class="button button-primary" disabled={busy}>
            {busy && <Spinner />}
            {submit}
          </button>
        </div>
      </form>
    </section>
  );
}

/**
 * A text-like field of a form: its label and input, and a hint below (`${id}-hint`, which describes the input) when
 * one is given. `wide` spans the form's grid.
 */
export function InputField({
  id,
  label,
  type,
  value,
  onValue,
  hint,
  wide,
  required,
  minLength,
  placeholder,
  spellcheck,
  autoComplete = 'off',
}: {
  id: string;
  label: string;
  type: 'text' | 'email' | 'password';
  value: string;
  onValue: (value: string) => void;
  hint?: ComponentChildren;
  wide?: boolean;
  required?: boolean;
  minLength?: number;
  placeholder?: string;
  spellcheck?: boolean;
  autoComplete?: string;
}) {
  const hintId = hint ? `${id}-hint` : undefined;
  return (
    <div class={wide ? 'field field-wide' : 'field'}>
      <label for={id}>{label}</label>
      <input
        id={id}
        // Preact's types tie a password input to other attributes than a text one; these three take the same here.
        type={type as 'text'}
        required={required}
        minLength={minLength}
        value={value}
        onInput={(e) => onValue(e.currentTarget.value)}
        placeholder={placeholder}
        autoComplete={autoComplete}
        spellcheck={spellcheck}
        aria-describedby={hintId}
      />
      {hint && (
        <p class="field-hint" id={hintId}>
          {hint}
        </p>
      )}
    </div>
  );
}

/** An option of a FilterSelect: its value and what it says. */
export interface FilterOption {
  value: string;
  label: ComponentChildren;
}

/**
 * One filter of a page's row of filters (Range, Key, Model…): its label and its select. `any` names the choice of
 * all (value ""), first; `children` are options after the others; `short` narrows the field.
 */
export function FilterSelect({
  id,
  label,
  value,
  onChange,
  any,
  options,
  short,
  children,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
  any?: string;
  options: readonly FilterOption[];
  short?: boolean;
  children?: ComponentChildren;
}) {
  return (
    <div class={short ? 'field field-inline field-short' : 'field field-inline'}>
      <label for={id}>{label}</label>
      <select id={id} value={value} onChange={(e) => onChange(e.currentTarget.value)}>
        {any !== undefined && <option value="">{any}</option>}
        {options.map((option) => (
          <option value={option.value} key={option.value}>
            {option.label}
          </option>
        ))}
        {children}
      </select>
    </div>
  );
}

/** A select of one of a few fixed `choices` (a role, a budget's period), each option said by its name in `names`. */
export function ChoiceSelect<T extends string>({
  id,
  value,
  choices,
  names,
  onChange,
  disabled,
}: {
  id: string;
  value: T;
  choices: readonly T[];
  names: Record<T, string>;
  onChange: (value: T) => void;
  disabled?: boolean;
}) {
  return (
    <select id={id} value={value} disabled={disabled} onChange={(event) => onChange(event.currentTarget.value as T)}>
      {choices.map((choice) => (
        <option key={choice} value={choice}>
          {names[choice]}
        </option>
      ))}
    </select>
  );
}
