import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import type { McpServerConsoleView, McpToolsPage } from '../../../shared/console-api.js';
import { type Column, DataTable } from '../components/data-table';
import { ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
import { Snippet } from '../components/snippet';
import { count, moment } from '../format';
import { api, messageOf } from '../api';
import { useAccount } from '../app-context';
import { McpServerDialog, RemoveMcpServerDialog } from './mcp-server-dialogs';

/*
 * Tools: the upstream MCP servers agents reach through the gateway's /mcp, as the workers' last checks found them,
 * and which of their tools each of the person's keys may use; with the lines to paste into Claude Code, Gemini CLI and
 * Codex. An admin also sees where each server is reached and every tool (a team's rule hides the others from its
 * people).
 */

const statusBadge = (server: McpServerConsoleView) =>
  server.status === 'ok' ? (
    <span class="badge badge-ok">OK</span>
  ) : server.status === 'failing' ? (
    <span class="badge badge-warn" title={server.error ?? undefined}>
      Failing
    </span>
  ) : (
    <span class="badge">Not checked yet</span>
  );

/** "$0.002", "Free": the price without its trailing zeros. */
const priceText = (usd: string) =>
  Number(usd) === 0 ? 'Free' : `$${usd.includes('.') ? usd.replace(/0+$/, '').replace(/\.$/, '') : usd}`;

const serverColumns: Column<McpServerConsoleView>[] = [
  { id: 'name', label: 'Server', lead: true, class: 'mono cell-strong', cell: (server) => server.name },
  {
    id: 'status',
    label: 'Status',
    cell: (server) => (
      <>
        {statusBadge(server)}
        {server.checked_at !== null && (
          <span class="cell-sub muted nowrap">checked {moment(server.checked_at * 1000)}</span>
        )}
        {server.status === 'failing' && server.error && <span class="cell-sub muted">{server.error}</span>}
      </>
    ),
  },
  { id: 'tools', label: 'Tools', numeric: true, cell: (server) => count(server.tools.length) },
  { id: 'price', label: 'Per call', numeric: true, cell: (server) => priceText(server.price_per_call_usd) },
  { id: 'cap', label: 'At once', numeric: true, priority: 'wide', cell: (server) => count(server.max_concurrency) },
  {
    id: 'timeout',
    label: 'Timeout',
    numeric: true,
    priority: 'wide',
    cell: (server) => `${count(server.timeout_ms / 1000)} s`,
  },
];

/**
 * What an admin sees besides: where each server is reached, the headers it is sent (by name), "Check now", and for the
 * servers they added, Change and Remove.
 */
const adminColumns = (
  check: (name: string) => void,
  checking: string | undefined,
  edit: (server: McpServerConsoleView) => void,
  remove: (server: McpServerConsoleView) => void,
): Column<McpServerConsoleView>[] => [
  {
    id: 'check',
    label: 'Actions',
    cell: (server) => (
      <span class="row-actions">
        <button
          type="button"
          class="button button-secondary button-small"
          disabled={checking !== undefined}
          onClick={() => check(server.name)}
          aria-label={`Check ${server.name} now`}
        >
          {checking === server.name ? 'Checking…' : 'Check now'}
        </button>
        {server.source === 'admin' && (
          <>
            <button
              type="button"
              class="button button-secondary button-small"
              onClick={() => edit(server)}
              aria-label={`Change ${server.name}`}
            >
              Change
            </button>
            <button
              type="button"
              class="button button-secondary button-small"
              onClick={() => remove(server)}
              aria-label={`Remove ${server.name}`}
            >
              Remove
            </button>
          </>
        )}
      </span>
    ),
  },
  {
    id: 'where',
    label: 'Reached at',
    priority: 'detail',
    class: 'mono small',
    cell: (server) =>
      server.url ?? <span class="muted">{server.transport === 'stdio' ? 'run by the workers' : '—'}</span>,
  },
  {
    id: 'headers',
    label: 'Headers sent',
    priority: 'detail',
    class: 'mono small',
    cell: (server) =>
      server.header_names && server.header_names.length > 0 ? (
        server.header_names.join(', ')
      ) : (
        <span class="muted">—</span>
      ),
  },
  {
    id: 'source',
    label: 'Set by',
    priority: 'detail',
    cell: (server) => (server.source === 'file' ? 'MCP_SERVERS_FILE' : 'an admin'),
  },
];

/**
 * The agents' configs for the endpoint, the key in them as a placeholder (its secret is shown only when it is made).
 */
function agentSnippets(endpoint: string, keyHint: string | undefined) {
  const key = keyHint ? `<your key ${keyHint}>` : '<your key>';
  const server = { Authorization: `Bearer ${key}` };
  return [
    {
      title: 'Claude Code (.mcp.json)',
      code: JSON.stringify({ mcpServers: { switchyard: { type: 'http', url: endpoint, headers: server } } }, null, 2),
    },
    {
      title: 'Gemini CLI (~/.gemini/settings.json)',
      code: JSON.stringify({ mcpServers: { switchyard: { httpUrl: endpoint, headers: server } } }, null, 2),
    },
    // Codex reads the key from the environment rather than the file.
    {
      title: 'Codex (~/.codex/config.toml)',
      code: [
        `# export SWITCHYARD_API_KEY=${key}`,
        '[mcp_servers.switchyard]',
        `url = ${JSON.stringify(endpoint)}`,
        'bearer_token_env_var = "SWITCHYARD_API_KEY"',
      ].join('\n'),
    },
  ];
}

/**
 * The Responses API's `mcp` tool naming one of the servers: the gateway runs the tool loop on any model (the
 * console says it without a server to name).
 */
function apiSnippet(endpoint: string, keyHint: string | undefined, server: string | undefined) {
  if (server === undefined) return undefined;
  const key = keyHint ? `<your key ${keyHint}>` : '<your key>';
  const body = {
    model: 'gpt-4o-mini',
    input: 'What do my notes say?',
    tools: [{ type: 'mcp', server_label: server, require_approval: 'never' }],
  };
  return {
    title: 'Any model, through the API (the gateway calls the tools)',
    code: [
      `curl ${endpoint.replace(/\/mcp$/, '/v1/responses')} \\`,
      `  -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\`,
      `  -d '${JSON.stringify(body)}'`,
    ].join('\n'),
  };
}

export function ToolsPage() {
  useTitle('Tools');
  const page = useApi<McpToolsPage>('/mcp', 10_000);
  const data = page.data;
  const [keyId, setKeyId] = useState('');
  const [checking, setChecking] = useState<string | undefined>(undefined);
  const [checkError, setCheckError] = useState<string | undefined>(undefined);
  const admin = useAccount().role === 'admin';
  const [editing, setEditing] = useState<McpServerConsoleView | 'new' | undefined>(undefined);
  const [removing, setRemoving] = useState<McpServerConsoleView | undefined>(undefined);
  const check = (name: string) => {
    setChecking(name);
    setCheckError(undefined);
    api('POST', `/admin/mcp/servers/${encodeURIComponent(name)}/check`)
      .then(() => page.reload())
      .catch((error: unknown) => setCheckError(messageOf(error)))
      .finally(() => setChecking(undefined));
  };
  const key = data?.keys.find((candidate) => candidate.id === keyId);
  const allowed = key ? new Set(key.tools) : undefined;
  const shown = data?.servers.map((server) => ({
    ...server,
    tools: allowed ? server.tools.filter((tool) => allowed.has(`${server.name}/${tool.name}`)) : server.tools,
  }));
  return (
    <>
      <PageHeader
        title="Tools"
        description="The MCP servers your agents reach through this gateway with their key: each call is queued, limited, logged and billed like any request."
      />
      <ErrorMessage message={page.error} />
      {data && data.servers.length === 0 && (
        <p class="muted">
          No MCP servers are set on this gateway
          {admin ? ': add one, or list them in MCP_SERVERS_FILE.' : '. An administrator adds them.'}
        </p>
      )}
      {data && data.servers.length === 0 && admin && (
        <button type="button" class="button button-primary" onClick={() => setEditing('new')}>
          Add server
        </button>
      )}
      {editing !== undefined && (
        <McpServerDialog
          server={editing === 'new' ? undefined : editing}
          onClose={() => setEditing(undefined)}
          onSaved={() => {
            setEditing(undefined);
            page.reload();
          }}
        />
      )}
      {removing && (
        <RemoveMcpServerDialog
          server={removing}
          onClose={() => setRemoving(undefined)}
          onRemoved={() => {
            setRemoving(undefined);
            page.reload();
          }}
        />
      )}
      {data && data.servers.length > 0 && (
        <>
          <section aria-labelledby="connect-heading" class="section">
            <h2 id="connect-heading">Connect an agent</h2>
            <p class="muted">
              Give your agent the endpoint <code class="mono">{data.endpoint}</code> with one of your keys as a header.
              Tools are named <code class="mono">&lt;server&gt;__&lt;tool&gt;</code>.
            </p>
            {data.keys.length > 0 && (
              <div class="field field-inline tools-key">
                <label for="tools-key">Key</label>
                <select id="tools-key" value={keyId} onChange={(event) => setKeyId(event.currentTarget.value)}>
                  <option value="">Every tool the team may use</option>
                  {data.keys.map((candidate) => (
                    <option key={candidate.id} value={candidate.id}>
                      {candidate.name} ({candidate.hint})
                    </option>
                  ))}
                </select>
              </div>
            )}
            {agentSnippets(data.endpoint, key?.hint).map((snippet) => (
              <Snippet key={snippet.title} title={snippet.title} code={snippet.code} />
            ))}
            {(() => {
              const snippet = apiSnippet(
                data.endpoint,
                key?.hint,
                shown?.find((server) => server.tools.length > 0)?.name,
              );
              return snippet && <Snippet title={snippet.title} code={snippet.code} />;
            })()}
          </section>
          <section aria-labelledby="servers-heading" class="section">
            <div class="section-head">
              <h2 id="servers-heading">Servers</h2>
              {admin && (
                <button type="button" class="button button-secondary button-small" onClick={() => setEditing('new')}>
                  Add server
                </button>
              )}
            </div>
            <ErrorMessage message={checkError} />
            <DataTable
              label="MCP servers"
              columns={
                admin ? [...serverColumns, ...adminColumns(check, checking, setEditing, setRemoving)] : serverColumns
              }
              rows={data.servers}
              rowKey={(server) => server.name}
              skeletonRows={2}
              empty="No servers."
            />
          </section>
          <section aria-labelledby="tools-heading" class="section">
            <h2 id="tools-heading">{key ? `Tools ${key.name} may use` : 'Tools'}</h2>
            {data.team_tools !== null && (
              <p class="muted">
                This team may use only {data.team_tools.length === 0 ? 'no tools' : data.team_tools.join(', ')}.
              </p>
            )}
            {key && key.mcp_tools !== null && (
              <p class="muted">
                This key is limited to {key.mcp_tools.length === 0 ? 'no tools' : key.mcp_tools.join(', ')}.
              </p>
            )}
            <dl class="tool-list" aria-label={key ? `Tools ${key.name} may use` : 'Tools'}>
              {shown!.flatMap((server) =>
                server.tools.map((tool) => (
                  <Fragment key={`${server.name}/${tool.name}`}>
                    <dt class="mono">
                      {server.name}__{tool.name}
                    </dt>
                    <dd class="muted">{tool.title ?? tool.description ?? ''}</dd>
                  </Fragment>
                )),
              )}
            </dl>
            {shown!.every((server) => server.tools.length === 0) && (
              <p class="muted">{key ? 'This key may use no tools.' : 'No tools are listed.'}</p>
            )}
          </section>
        </>
      )}
    </>
  );
}
