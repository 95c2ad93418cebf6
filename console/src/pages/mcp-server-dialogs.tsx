import type { TargetedSubmitEvent } from 'preact';
import { useState } from 'preact/hooks';
import type { McpServerConsoleView } from '../../../shared/console-api.js';
import { api } from '../api';
import { ConfirmDialog, Dialog, DialogFormActions, ErrorMessage, useSending } from '../components/ui';

/*
 * An admin's MCP servers on the Tools page: add one (reached by URL: a server the workers run is the file's alone),
 * change one they added, remove it. Headers are entered once and never shown again: a change leaves them as they
 * are unless new ones are given (or "Send no headers" is ticked); the same for a URL's hidden part.
 */

const namePattern = /^(?!.*__)[a-z0-9][a-z0-9_-]{0,62}$/;
const headerName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** `Name: value` a line → the headers, or what is wrong with a line. */
export function parseHeaderLines(text: string): Record<string, string> | string {
  const headers: Record<string, string> = {};
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon).trim() : '';
    if (!headerName.test(name)) return `Line ${index + 1}: write each header as Name: value.`;
    headers[name] = line.slice(colon + 1).trim();
  }
  return headers;
}

/** The form's fields as the API takes them, or what is wrong with them. */
function fieldsOf(
  form: { url: string; cap: string; timeoutS: string; price: string },
  creating: boolean,
): Record<string, unknown> | string {
  const fields: Record<string, unknown> = {};
  const url = form.url.trim();
  if (url !== '') {
    if (!/^https?:\/\/[^\s]+$/.test(url)) return 'Enter the server’s http or https URL.';
    fields.url = url;
  } else if (creating) return 'Enter the server’s URL.';
  const cap = Number(form.cap);
  if (!Number.isInteger(cap) || cap < 1 || cap > 10_000) return 'Calls at once: a whole number from 1 to 10,000.';
  fields.max_concurrency = cap;
  const timeout = Number(form.timeoutS);
  if (!Number.isFinite(timeout) || timeout < 0.1 || timeout > 3600) return 'Timeout: from 0.1 to 3,600 seconds.';
  fields.timeout_ms = Math.round(timeout * 1000);
  const price = form.price.trim() === '' ? '0' : form.price.trim();
  if (!/^\d{1,9}(\.\d{1,6})?$/.test(price)) return 'Price per call: dollars with at most six decimals, e.g. 0.001.';
  fields.price_per_call_usd = price;
  return fields;
}

export function McpServerDialog({
  server,
  onClose,
  onSaved,
}: {
  server?: McpServerConsoleView;
  onClose: () => void;
  onSaved: () => void;
}) {
  const creating = server === undefined;
  const [name, setName] = useState('');
  const [url, setUrl] = useState('');
  const [transport, setTransport] = useState(server?.transport === 'sse' ? 'sse' : 'streamable-http');
  const [headers, setHeaders] = useState('');
  const [noHeaders, setNoHeaders] = useState(false);
  const [cap, setCap] = useState(String(server?.max_concurrency ?? 20));
  const [timeoutS, setTimeoutS] = useState(String((server?.timeout_ms ?? 60_000) / 1000));
  const [price, setPrice] = useState(server ? server.price_per_call_usd : '0');
  const [keep, setKeep] = useState(server?.keep_arguments ?? false);
  const { busy, error, setError, send } = useSending();
  const held = server?.header_names ?? [];

  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (creating && !namePattern.test(name.trim()))
      return setError('Name: lower-case letters, digits, - and _ (no __), starting with a letter or digit.');
    const fields = fieldsOf({ url, cap, timeoutS, price }, creating);
    if (typeof fields === 'string') return setError(fields);
    const given = parseHeaderLines(headers);
    if (typeof given === 'string') return setError(given);
    if (noHeaders) fields.headers = {};
    else if (Object.keys(given).length > 0 || creating) fields.headers = given;
    // A URL changed keeps the headers sent now only when they are given again: the API seals them together.
    if (!creating && fields.url !== undefined && fields.headers === undefined && held.length > 0) {
      return setError(`A new URL needs its headers again (${held.join(', ')}): enter them, or tick “Send no headers”.`);
    }
    fields.transport = transport;
    fields.keep_arguments = keep;
    void send(async () => {
      if (creating) await api('POST', '/admin/mcp/servers', { name: name.trim(), ...fields });
      else await api('PATCH', `/admin/mcp/servers/${encodeURIComponent(server.name)}`, fields);
      onSaved();
    });
  };

  return (
    <Dialog title={creating ? 'Add an MCP server' : `Change ${server.name}`} onClose={onClose} wide>
      <p class="dialog-lead">
        {creating
          ? 'A server the workers reach over HTTP (Streamable HTTP, or the legacy HTTP+SSE). Its headers are kept ' +
            'sealed on the gateway and never shown again.'
          : 'What you leave empty stays as it is. Headers are never shown: enter them all again to change them.'}
      </p>
      <form onSubmit={submit} noValidate>
        <div class="form-stack">
          {creating && (
            <div class="field">
              <label for="mcp-name">Name</label>
              <input
                id="mcp-name"
                type="text"
                required
                maxLength={63}
                value={name}
                onInput={(e) => setName(e.currentTarget.value)}
                placeholder="e.g. github"
                autoComplete="off"
                spellcheck={false}
                autoFocus
                aria-describedby="mcp-name-hint"
              />
              <p class="field-hint" id="mcp-name-hint">
                Its tools are named <code>{name.trim() || 'name'}__tool</code> on /mcp, and it is served alone at /mcp/
                {name.trim() || 'name'}.
              </p>
            </div>
          )}
          <div class="field">
            <label for="mcp-url">URL</label>
            <input
              id="mcp-url"
              type="url"
              required={creating}
              value={url}
              onInput={(e) => setUrl(e.currentTarget.value)}
              placeholder={creating ? 'https://tools.example.com/mcp' : `${server.url ?? ''} (unchanged)`}
              autoComplete="off"
              spellcheck={false}
              autoFocus={!creating}
            />
          </div>
          <div class="field">
            <label for="mcp-transport">Transport</label>
            <select id="mcp-transport" value={transport} onChange={(e) => setTransport(e.currentTarget.value)}>
              <option value="streamable-http">Streamable HTTP</option>
              <option value="sse">HTTP+SSE (legacy)</option>
            </select>
          </div>
          <div class="field">
            <label for="mcp-headers">Headers</label>
            <textarea
              id="mcp-headers"
              rows={3}
              value={headers}
              disabled={noHeaders}
              onInput={(e) => setHeaders(e.currentTarget.value)}
              placeholder={
                creating
                  ? 'Authorization: Bearer …'
                  : held.length > 0
                    ? `Sent now: ${held.join(', ')} (unchanged)`
                    : 'None'
              }
              autoComplete="off"
              spellcheck={false}
              aria-describedby="mcp-headers-hint"
            />
            <p class="field-hint" id="mcp-headers-hint">
              One <code>Name: value</code> a line, sent with every request to the server; never shown again.
            </p>
          </div>
          {!creating && held.length > 0 && (
            <div class="check">
              <input
                id="mcp-no-headers"
                type="checkbox"
                checked={noHeaders}
                onChange={(e) => setNoHeaders(e.currentTarget.checked)}
              />
              <label for="mcp-no-headers">Send no headers</label>
            </div>
          )}
          <div class="field">
            <label for="mcp-cap">Calls at once</label>
            <input
              id="mcp-cap"
              type="number"
              min={1}
              max={10_000}
              step={1}
              inputMode="numeric"
              value={cap}
              onInput={(e) => setCap(e.currentTarget.value)}
            />
          </div>
          <div class="field">
            <label for="mcp-timeout">Timeout (s)</label>
            <input
              id="mcp-timeout"
              type="number"
              min={0.1}
              max={3600}
              step="any"
              inputMode="decimal"
              value={timeoutS}
              onInput={(e) => setTimeoutS(e.currentTarget.value)}
            />
          </div>
          <div class="field">
            <label for="mcp-price">Price per call (USD)</label>
            <input
              id="mcp-price"
              type="text"
              inputMode="decimal"
              value={price}
              onInput={(e) => setPrice(e.currentTarget.value)}
              placeholder="0"
            />
          </div>
          <div class="check">
            <input id="mcp-keep" type="checkbox" checked={keep} onChange={(e) => setKeep(e.currentTarget.checked)} />
            <label for="mcp-keep">Keep each call’s arguments in the request log</label>
          </div>
        </div>
        <ErrorMessage message={error} />
        <DialogFormActions onCancel={onClose} busy={busy} submit={creating ? 'Add server' : 'Save'} />
      </form>
    </Dialog>
  );
}

export function RemoveMcpServerDialog({
  server,
  onClose,
  onRemoved,
}: {
  server: McpServerConsoleView;
  onClose: () => void;
  onRemoved: () => void;
}) {
  return (
    <ConfirmDialog
      title={`Remove ${server.name}?`}
      confirm="Remove server"
      onClose={onClose}
      onConfirm={async () => {
        await api('DELETE', `/admin/mcp/servers/${encodeURIComponent(server.name)}`);
        onRemoved();
      }}
    >
      Its tools stop being served at once, to every agent; calls already waiting for it are refused, unbilled. Its
      headers are deleted with it.
    </ConfirmDialog>
  );
}
