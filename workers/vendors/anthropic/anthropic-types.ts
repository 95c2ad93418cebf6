/**
 * The parts of the Anthropic Messages API request the gateway writes. Only
 * what the OpenAI → Anthropic mapping can produce is typed here; responses
 * are read field by field (see `anthropic-response.ts`, `anthropic-stream.ts`)
 * so a vendor adding fields breaks nothing.
 */

export interface AnthropicTextBlock {
  type: 'text';
  text: string;
}

export type AnthropicSource = { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string };

export interface AnthropicImageBlock {
  type: 'image';
  source: AnthropicSource;
}

export interface AnthropicDocumentBlock {
  type: 'document';
  source: AnthropicSource;
}

export interface AnthropicToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: Record<string, unknown>;
}

export interface AnthropicToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content: string | AnthropicTextBlock[];
}

export type AnthropicContentBlock =
  AnthropicTextBlock | AnthropicImageBlock | AnthropicDocumentBlock | AnthropicToolUseBlock | AnthropicToolResultBlock;

export interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: AnthropicContentBlock[];
}

export interface AnthropicTool {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
  strict?: boolean;
}

/** Anthropic's web search, a tool Anthropic runs itself (its answer's search blocks are Anthropic's own). */
export interface AnthropicWebSearchTool {
  type: 'web_search_20250305';
  name: 'web_search';
  user_location?: Record<string, unknown>;
}

export type AnthropicToolChoice =
  | { type: 'auto' | 'any'; disable_parallel_tool_use?: boolean }
  | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean }
  | { type: 'none' };

export interface AnthropicRequestBody {
  model: string;
  max_tokens: number;
  messages: AnthropicMessage[];
  system?: string | AnthropicTextBlock[];
  temperature?: number;
  top_p?: number;
  stop_sequences?: string[];
  metadata?: { user_id: string };
  tools?: Array<AnthropicTool | AnthropicWebSearchTool>;
  tool_choice?: AnthropicToolChoice;
  output_config?: { format: { type: 'json_schema'; schema: Record<string, unknown> } };
  /** Extended thinking; `budget_tokens` ≥ 1024 and below `max_tokens`. */
  thinking?: { type: 'enabled'; budget_tokens: number };
  stream?: boolean;
}
