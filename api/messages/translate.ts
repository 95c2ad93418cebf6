import { createHash } from 'node:crypto';
import { prefixedToolName } from '../../shared/mcp/calls.js';
import { chatToolName } from '../../shared/messages-tools.js';
import { isRecord } from '../../shared/response-object.js';
import type { ChatCompletionRequest, ChatMessage } from '../../shared/schemas/chat.js';
import { messagesContentBlockSchema, type MessagesRequest } from '../../shared/schemas/messages.js';
import {
  applyChatSettings,
  chatResponseFormat,
  effortForBudget,
  type ChatToolCall,
  type ChatUserPart,
  type DeclaredOutput,
} from '../dialects/chat-request.js';
import { chatToolFields, type ChoiceWording, type DeclaredChoice, type DeclaredTools } from '../dialects/chat-tools.js';
import { invalidAt, parseAt, type FieldPath } from '../dialects/field-path.js';

export { effortForBudget } from '../dialects/chat-request.js';

/*
 * Anthropic's Messages API over the chat adapters: a Messages request as the chat request the adapters of every
 * vendor but Anthropic run (a model Anthropic serves is sent the request as the client wrote it). The system
 * prompt becomes a system message, `tool_use` blocks assistant tool calls, `tool_result` blocks tool messages,
 * and the sampling fields their chat counterparts. What chat has no form for (thinking blocks, Anthropic's server
 * tools, `top_k`, `context_management`…) is left out and named in `dropped`, for the worker to log; what the
 * client clearly needs and chat cannot carry (documents by URL or file id, a forced server tool) is a 400. This file
 * reads Anthropic's shapes; what chat gets for the tools, the choice and the settings is the dialect layer's policy
 * (api/dialects/), the same for every dialect.
 *
 * It runs on the api's event loop for requests of up to 100,000 messages, so every step is one pass over the
 * request: names are looked up in sets, nothing is searched per message.
 */

/** The chat request, and what of the Messages request it leaves out (deduplicated, in the order met). */
export interface MessagesTranslation {
  chat: ChatCompletionRequest;
  dropped: string[];
}

type Path = FieldPath;
type Block = Record<string, unknown>;
type UserPart = ChatUserPart;

// ---- blocks of a known type with the wrong fields ----

/** The block types the request schema knows the shape of. */
const knownBlock = messagesContentBlockSchema.options[0];

/**
 * A block of a type the gateway reads whose fields are not what that type has. The request schema refuses such a
 * block already; this is the check where its fields are read, should a block reach here another way: the 400 is
 * the one the request body parser gives.
 */
function malformed(block: unknown, path: Path): never {
  parseAt(knownBlock, block, path);
  throw invalidAt(path, `a '${String((block as Block).type)}' block of a shape this gateway cannot read.`);
}

const text = (block: Block, path: Path): string =>
  typeof block.text === 'string' ? block.text : malformed(block, path);

// ---- user content ----

/** The request's name for a block's place, for `dropped`. */
const blockKind = (where: string, type: unknown) => `${where} of type ${String(type)}`;

class Translator {
  readonly dropped = new Set<string>();
  readonly messages: ChatMessage[] = [];

  drop(what: string): void {
    this.dropped.add(what);
  }

  /** An image block as chat's `image_url` part. */
  image(block: Block, path: Path): UserPart {
    const source = block.source;
    if (!isRecord(source)) return malformed(block, path);
    if (source.type === 'base64' && typeof source.media_type === 'string' && typeof source.data === 'string') {
      return { type: 'image_url', image_url: { url: `data:${source.media_type};base64,${source.data}` } };
    }
    if (source.type === 'url' && typeof source.url === 'string') {
      // The vendor, or the gateway for a vendor that wants inline data, fetches the image: only web URLs, as
      // Anthropic itself takes, and as chat's own schema allows.
      if (!/^https?:\/\//i.test(source.url)) throw invalidAt([...path, 'source', 'url'], 'expected an http(s) URL.');
      return { type: 'image_url', image_url: { url: source.url } };
    }
    if (source.type === 'file') throw byFile(path);
    return malformed(block, path);
  }

  /**
   * A document block as chat parts: a base64 document as a `file` part (chat's form for PDFs), plain text as a
   * text part headed by its title and context, a content document as its text and images. Chat has no part for a
   * document by URL, and the gateway has no Files API to read a `file_id` from: both are 400s, not dropped, since
   * the model would answer without the document the client is asking about.
   */
  document(block: Block, path: Path, target: UserPart[]): void {
    const source = block.source;
    if (!isRecord(source)) return malformed(block, path);
    const title = typeof block.title === 'string' && block.title !== '' ? block.title : undefined;
    const heading = [
      title,
      typeof block.context === 'string' && block.context !== '' ? block.context : undefined,
    ].filter((line) => line !== undefined);
    switch (source.type) {
      case 'base64': {
        if (typeof source.media_type !== 'string' || typeof source.data !== 'string') return malformed(block, path);
        const filename = title ?? (source.media_type === 'application/pdf' ? 'document.pdf' : 'document');
        // The file part has a name but no place for the context the client gave about the document: it goes just
        // before.
        if (typeof block.context === 'string' && block.context !== '')
          target.push({ type: 'text', text: block.context });
        target.push({ type: 'file', file: { file_data: `data:${source.media_type};base64,${source.data}`, filename } });
        return;
      }
      case 'text':
        if (typeof source.data !== 'string') return malformed(block, path);
        target.push({ type: 'text', text: [...heading, source.data].join('\n\n') });
        return;
      case 'content': {
        if (heading.length > 0) target.push({ type: 'text', text: heading.join('\n\n') });
        const content = source.content;
        if (typeof content === 'string') {
          target.push({ type: 'text', text: content });
          return;
        }
        if (!Array.isArray(content)) return malformed(block, path);
        content.forEach((inner: unknown, k) => {
          const innerPath = [...path, 'source', 'content', k];
          if (!isRecord(inner)) return malformed(inner, innerPath);
          if (inner.type === 'text') target.push({ type: 'text', text: text(inner, innerPath) });
          else if (inner.type === 'image') target.push(this.image(inner, innerPath));
          else this.drop(blockKind('document content', inner.type));
        });
        return;
      }
      case 'url':
        throw invalidAt(
          [...path, 'source'],
          "documents given by URL are only served for Anthropic models; send the document's content as base64 data.",
          'unsupported_parameter',
        );
      case 'file':
        throw byFile(path);
      default:
        return malformed(block, path);
    }
  }

  /**
   * A user turn: its tool results as tool messages first (chat wants them right after the assistant's calls), then the
   * rest as one user message.
   */
  userTurn(blocks: readonly Block[], path: Path): void {
    const parts: UserPart[] = [];
    // What tool results hold beyond text: chat's tool messages take text only, so images and documents a tool
    // returned go in the user message after the tool messages, each group headed by the call it came from, so
    // the model can tell them from what the user sent.
    const attachments: UserPart[] = [];
    blocks.forEach((block, j) => {
      const blockPath = [...path, 'content', j];
      switch (block.type) {
        case 'text':
          parts.push({ type: 'text', text: text(block, blockPath) });
          return;
        case 'image':
          parts.push(this.image(block, blockPath));
          return;
        case 'document':
          this.document(block, blockPath, parts);
          return;
        case 'tool_result':
          this.toolResult(block, blockPath, attachments);
          return;
        case 'tool_use':
          throw invalidAt([...blockPath, 'type'], "'tool_use' blocks belong in assistant turns.");
        default:
          // Thinking blocks, search results, and whatever Anthropic adds: nothing a chat vendor can read.
          this.drop(blockKind('messages[].content[]', block.type));
      }
    });
    const content = [...attachments, ...parts];
    if (content.length > 0) this.messages.push({ role: 'user', content });
  }

  private toolResult(block: Block, path: Path, attachments: UserPart[]): void {
    const id = block.tool_use_id;
    if (typeof id !== 'string' || id === '') return malformed(block, path);
    let output: string;
    const content = block.content;
    if (content === undefined || content === null) output = '';
    else if (typeof content === 'string') output = content;
    else if (Array.isArray(content)) {
      const texts: string[] = [];
      const attached: UserPart[] = [];
      content.forEach((inner: unknown, k) => {
        const innerPath = [...path, 'content', k];
        if (!isRecord(inner)) return malformed(block, path);
        if (inner.type === 'text') texts.push(text(inner, innerPath));
        else if (inner.type === 'image') attached.push(this.image(inner, innerPath));
        else if (inner.type === 'document') this.document(inner, innerPath, attached);
        else this.drop(blockKind('tool_result content', inner.type));
      });
      // Separate blocks are separate pieces of the result (an output and a note on it): a blank line keeps the
      // last line of one from running into the first of the next.
      output = texts.join('\n\n');
      if (attached.length > 0)
        attachments.push({ type: 'text', text: `Attached to the result of tool call ${id}:` }, ...attached);
    } else return malformed(block, path);
    // Chat's tool messages have no error flag: the failure is said in the content, where every vendor's model reads it.
    if (block.is_error === true) output = output === '' ? 'Error' : `Error: ${output}`;
    this.messages.push({ role: 'tool', tool_call_id: id, content: output });
  }

  /**
   * An assistant turn: its text as the content (Anthropic splits one answer into blocks, at citations for one, so the
   * pieces are joined as they are), its `tool_use` blocks as tool calls.
   */
  assistantTurn(blocks: readonly Block[], path: Path): void {
    let content = '';
    let calls: ChatToolCall[] = [];
    /**
     * The turn so far as one assistant message (its text, its calls); a turn left with nothing to say (only thinking)
     * is left out.
     */
    const flush = () => {
      if (calls.length > 0)
        this.messages.push({ role: 'assistant', content: content === '' ? null : content, tool_calls: calls });
      else if (content !== '') this.messages.push({ role: 'assistant', content });
      content = '';
      calls = [];
    };
    blocks.forEach((block, j) => {
      const blockPath = [...path, 'content', j];
      switch (block.type) {
        case 'text':
          content += text(block, blockPath);
          return;
        case 'tool_use': {
          if (typeof block.id !== 'string' || block.id === '' || typeof block.name !== 'string' || block.name === '') {
            return malformed(block, blockPath);
          }
          calls.push({
            id: block.id,
            type: 'function',
            function: { name: chatToolName(block.name), arguments: JSON.stringify(block.input ?? {}) },
          });
          return;
        }
        case 'mcp_tool_use': {
          // A call the gateway's tool loop made (`mcp_servers`): the model's call of `<server>__<tool>`.
          if (
            typeof block.id !== 'string' ||
            block.id === '' ||
            typeof block.name !== 'string' ||
            typeof block.server_name !== 'string'
          )
            return malformed(block, blockPath);
          calls.push({
            id: block.id,
            type: 'function',
            function: {
              name: prefixedToolName(block.server_name, block.name),
              arguments: JSON.stringify(block.input ?? {}),
            },
          });
          return;
        }
        case 'mcp_tool_result': {
          // Its answer, in the same turn: the turn so far, then the tool's message.
          if (typeof block.tool_use_id !== 'string' || block.tool_use_id === '') return malformed(block, blockPath);
          flush();
          const parts =
            typeof block.content === 'string'
              ? [block.content]
              : Array.isArray(block.content)
                ? block.content.map((part) => (isRecord(part) && typeof part.text === 'string' ? part.text : ''))
                : [];
          const output = parts.join('');
          this.messages.push({
            role: 'tool',
            tool_call_id: block.tool_use_id,
            content: block.is_error === true ? `Error: ${output}` : output,
          });
          return;
        }
        case 'tool_result':
          throw invalidAt([...blockPath, 'type'], "'tool_result' blocks belong in user turns.");
        default:
          // Thinking and redacted thinking are Anthropic's signed reasoning, which no other vendor takes back;
          // server tool blocks (`server_tool_use`, `web_search_tool_result`…) were Anthropic's own calls.
          this.drop(blockKind('messages[].content[]', block.type));
      }
    });
    flush();
  }
}

const byFile = (path: Path) =>
  invalidAt(
    [...path, 'source'],
    "files given by 'file_id' are not supported by this gateway (it has no Files API); send the content as " +
      'base64 data.',
    'unsupported_parameter',
  );

// ---- tools ----

/** How the Messages API says a tool choice, for a refusal in its terms. */
const choiceWording: ChoiceWording = {
  path: ['tool_choice'],
  namePath: ['tool_choice', 'name'],
  required: "tool_choice 'any'",
  declined: 'is run by Anthropic',
};

/**
 * The request's tools in the dialect layer's terms. Client tools (no `type`, or `custom`) are functions under their
 * chat names. Anthropic's web search tool is the vendor's own search for a model whose vendor searches the web
 * (its `user_location`; its other settings have no chat counterpart). Server tools (a versioned type such as
 * `web_search_20250305` or `bash_20250124`) are run by Anthropic, or by the client on Anthropic's own protocol: a
 * chat vendor has neither, so they are declined, as the Responses path declines its built-in tools.
 */
function declareTools(tools: MessagesRequest['tools'], dropped: Set<string>, searches: boolean): DeclaredTools {
  const declared: DeclaredTools = { functions: [], declined: [] };
  for (const tool of tools ?? []) {
    // An MCP server's toolset: its tools are offered by the gateway's tool loop (api/mcp/loop-plan.ts).
    if (tool.type === 'mcp_toolset' || !('name' in tool) || typeof tool.name !== 'string') continue;
    if (searches && typeof tool.type === 'string' && tool.type.startsWith('web_search_')) {
      declared.search = { name: tool.name, settings: { userLocation: tool.user_location } };
      continue;
    }
    if (tool.type != null && tool.type !== 'custom') {
      declared.declined.push(tool.name);
      dropped.add(`tools[] of type ${tool.type}`);
      continue;
    }
    declared.functions.push({
      name: chatToolName(tool.name),
      description: tool.description,
      parameters: tool.input_schema,
      strict: typeof tool.strict === 'boolean' ? tool.strict : undefined,
    });
  }
  return declared;
}

/** The request's tool choice in the dialect layer's terms, and whether calls may run in parallel. */
function declareChoice(choice: MessagesRequest['tool_choice']): { choice?: DeclaredChoice; parallel?: boolean } {
  if (choice === undefined) return {};
  const parallel =
    'disable_parallel_tool_use' in choice && choice.disable_parallel_tool_use === true ? { parallel: false } : {};
  switch (choice.type) {
    case 'auto':
      return { choice: 'auto', ...parallel };
    case 'any':
      return { choice: 'required', ...parallel };
    case 'none':
      return { choice: 'none' };
    case 'tool':
      return { choice: { tool: choice.name, function: chatToolName(choice.name) }, ...parallel };
  }
}

// ---- the request ----

/**
 * The top-level fields read here (or, for `stream` and `service_tier`, decided by the worker); any other is dropped.
 */
const readFields = new Set([
  'model',
  'max_tokens',
  'messages',
  'system',
  'stop_sequences',
  'stream',
  'temperature',
  'top_p',
  'top_k',
  'metadata',
  'tools',
  'tool_choice',
  'thinking',
  'service_tier',
  'output_config',
]);

/**
 * `metadata.user_id` as chat's `user`: as it is when short, else a stable digest of it. Claude Code sends a JSON
 * object of ids (about 200 characters), where OpenAI takes an end user's id of at most 64; the vendor's abuse
 * tracking needs the same value for the same user, not the text.
 */
function chatUser(userId: string): string {
  return userId.length <= 64 ? userId : `user-${createHash('sha256').update(userId).digest('hex').slice(0, 32)}`;
}

/**
 * `output_config.format`'s JSON schema as the structured output chat has (under the name `output`, strict: what
 * Anthropic enforces). Its other settings (`effort`…) have no chat form and are named in `dropped`.
 */
function structuredOutput(outputConfig: unknown, dropped: Set<string>): DeclaredOutput | undefined {
  if (!isRecord(outputConfig)) {
    if (outputConfig != null) dropped.add('output_config');
    return undefined;
  }
  let output: DeclaredOutput | undefined;
  for (const [key, value] of Object.entries(outputConfig)) {
    if (value == null) continue;
    if (key === 'format' && isRecord(value) && value.type === 'json_schema' && isRecord(value.schema)) {
      output = { type: 'schema', name: 'output', schema: value.schema, strict: true };
    } else dropped.add(`output_config.${key}`);
  }
  return output;
}

/**
 * The chat request for a (validated) Messages request, for `model` (the catalog's id, and its output limit), with
 * the list of what it leaves out. Not streamed and with no service tier: the worker decides both.
 */
export function toChatRequest(
  request: MessagesRequest,
  model: { id: string; max_output_tokens: number; web_search?: boolean | undefined },
): MessagesTranslation {
  const translator = new Translator();
  const { dropped } = translator;

  // The system blocks stay separate parts: joining them would guess at a separator the client did not write.
  // Their cache_control is Anthropic's prompt caching; the chat vendors cache on their own.
  const system = request.system;
  const messages: ChatMessage[] = [];
  if (typeof system === 'string') {
    if (system !== '') messages.push({ role: 'system', content: system });
  } else if (system !== undefined && system.length > 0) {
    messages.push({ role: 'system', content: system.map((block) => ({ type: 'text' as const, text: block.text })) });
  }

  request.messages.forEach((message, i) => {
    const path = ['messages', i];
    // A system turn inside the conversation (Claude Code sends them, with Anthropic's mid-conversation-system
    // beta): chat vendors take a system message wherever it stands. Only its text blocks have a chat form.
    if (message.role === 'system') {
      const text =
        typeof message.content === 'string'
          ? message.content
          : (message.content as Block[])
              .filter((block) => block.type === 'text')
              .map((block) => String(block.text))
              .join('\n\n');
      if (text !== '') translator.messages.push({ role: 'system', content: text });
      return;
    }
    if (typeof message.content === 'string') {
      if (message.role === 'user') translator.messages.push({ role: 'user', content: message.content });
      else if (message.content !== '') translator.messages.push({ role: 'assistant', content: message.content });
      return;
    }
    const blocks = message.content as Block[];
    if (message.role === 'user') translator.userTurn(blocks, path);
    else translator.assistantTurn(blocks, path);
  });
  if (translator.messages.length === 0) {
    throw invalidAt(
      ['messages'],
      "nothing is left to send to this model once the blocks only Anthropic's models read (thinking, server tool " +
        'results) are left out.',
    );
  }
  // One push per message: spreading a 100,000-message array into push() would pass that many arguments.
  for (const message of translator.messages) messages.push(message);

  const chat: ChatCompletionRequest = { model: model.id, messages, max_completion_tokens: request.max_tokens };

  const tools = declareTools(request.tools, dropped, model.web_search === true);
  const { choice, parallel } = declareChoice(request.tool_choice);
  Object.assign(chat, chatToolFields(tools, choice, parallel, choiceWording));

  const metadata = request.metadata;
  const thinking = request.thinking;
  applyChatSettings(
    chat,
    {
      stop: request.stop_sequences && { sequences: request.stop_sequences, field: 'stop_sequences' },
      temperature: request.temperature,
      topP: request.top_p,
      user: typeof metadata?.user_id === 'string' ? chatUser(metadata.user_id) : undefined,
      maxTokens: request.max_tokens,
      modelMaxTokens: model.max_output_tokens,
      // Adaptive: the model decides how much to think; chat's default effort, which is OpenAI's default too.
      effort:
        thinking?.type === 'enabled'
          ? effortForBudget(thinking.budget_tokens)
          : thinking?.type === 'adaptive'
            ? 'medium'
            : undefined,
    },
    dropped,
  );
  if (request.top_k !== undefined) dropped.add('top_k');
  if (metadata !== undefined) {
    for (const [key, value] of Object.entries(metadata))
      if (key !== 'user_id' && value != null) dropped.add(`metadata.${key}`);
  }
  const output = structuredOutput((request as Record<string, unknown>).output_config, dropped);
  if (output) chat.response_format = chatResponseFormat(output);

  for (const [key, value] of Object.entries(request)) if (!readFields.has(key) && value != null) dropped.add(key);

  return { chat, dropped: [...dropped] };
}
