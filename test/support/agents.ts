import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { FakeResponse } from './fake-openai.js';

const run = promisify(execFile);

/** Where the real coding agents are: test tools (test/tools), installed by npm test, not with the gateway. */
export const agentBin = (name: string) => join(process.cwd(), 'test', 'tools', 'node_modules', '.bin', name);

/**
 * Gemini CLI 0.61's home and workspace under `dir`, its settings written: api-key auth selected (as `-p` needs), no
 * telemetry, update check or IDE, one attempt (a refusal ends the run at once), and whatever `extra` adds (the tools it
 * may use, the MCP servers it is given).
 */
export async function geminiCliHome(
  dir: string,
  extra: Record<string, unknown>,
): Promise<{ home: string; workspace: string }> {
  const [home, workspace] = [join(dir, 'home'), join(dir, 'work')];
  await mkdir(join(home, '.gemini'), { recursive: true });
  await mkdir(workspace);
  const settings = {
    security: { auth: { selectedType: 'gemini-api-key' } },
    general: { enableAutoUpdate: false, enableAutoUpdateNotification: false, maxAttempts: 1 },
    privacy: { usageStatisticsEnabled: false },
    telemetry: { enabled: false },
    ide: { enabled: false },
    ...extra,
  };
  await writeFile(join(home, '.gemini', 'settings.json'), JSON.stringify(settings));
  return { home, workspace };
}

/** A fresh folder under `root` for one agent run. */
export const agentDir = (root: string, prefix: string) => mkdtemp(join(root, `${prefix}-`));

/**
 * The fake OpenAI's answer calling one function tool (`call`: its id, name and arguments as JSON), as a Chat
 * Completions body or stream as the request asked (with the usage chunk when the request asked for it).
 */
export function openaiToolCall(
  body: Record<string, any>,
  call: { id: string; name: string; arguments: string },
  usage: { prompt_tokens: number; completion_tokens: number },
): FakeResponse {
  const toolCall = { id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } };
  const counted = { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens };
  const base = { id: `chatcmpl-${call.id}`, created: 1_730_000_000, model: body.model };
  if (!body.stream) {
    return {
      json: {
        ...base,
        object: 'chat.completion',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: null, refusal: null, tool_calls: [toolCall] },
            logprobs: null,
            finish_reason: 'tool_calls',
          },
        ],
        usage: counted,
      },
    };
  }
  const chunk = (rest: Record<string, unknown>) =>
    `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', ...rest })}\n\n`;
  return {
    sse: [
      chunk({
        choices: [
          {
            index: 0,
            delta: { role: 'assistant', content: null, tool_calls: [{ index: 0, ...toolCall }] },
            logprobs: null,
            finish_reason: null,
          },
        ],
      }),
      chunk({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'tool_calls' }] }),
      ...(body.stream_options?.include_usage ? [chunk({ choices: [], usage: counted })] : []),
      'data: [DONE]\n\n',
    ].join(''),
  };
}

/** `gemini <args>` in its home and workspace (geminiCliHome), stdin closed, two minutes at most: its JSON output. */
export async function runGeminiCli(
  args: readonly string[],
  where: { home: string; workspace: string },
  env: Record<string, string>,
): Promise<Record<string, any>> {
  const child = run(agentBin('gemini'), [...args, '-o', 'json'], {
    cwd: where.workspace,
    timeout: 120_000,
    env: { PATH: process.env.PATH, HOME: where.home, GEMINI_CLI_TRUST_WORKSPACE: 'true', ...env },
  });
  child.child.stdin?.end();
  const { stdout, stderr } = await child;
  if (process.env.TEST_AGENT_LOGS) process.stderr.write(`${stdout}\n${stderr}\n`);
  return JSON.parse(stdout) as Record<string, any>;
}

/**
 * `codex exec <prompt>` with `config` as its config.toml in a home of its own under `dir`, stdin closed, two minutes
 * at most: what it printed.
 */
export async function runCodex(
  dir: string,
  config: string,
  prompt: string,
  env: Record<string, string>,
): Promise<{ stdout: string; stderr: string }> {
  await writeFile(join(dir, 'config.toml'), config);
  const child = run(agentBin('codex'), ['exec', '--skip-git-repo-check', prompt], {
    cwd: dir,
    timeout: 120_000,
    env: { PATH: process.env.PATH, HOME: dir, CODEX_HOME: dir, ...env },
  });
  child.child.stdin?.end();
  const { stdout, stderr } = await child;
  if (process.env.TEST_AGENT_LOGS) process.stderr.write(`${stdout}\n${stderr}\n`);
  return { stdout, stderr };
}
