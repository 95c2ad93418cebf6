import type { TargetedKeyboardEvent, TargetedSubmitEvent } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api, isAbort, messageOf, streamChat, type ChatMessage } from '../api';
import { useApp } from '../app-context';
import { ErrorMessage, PageHeader, Spinner, useApi, useTitle } from '../components/ui';
import { size } from '../format';
import { ModelSelect, preferred } from '../components/model-select';
import { Speech, useSpeechState } from './playground-speech';
import type { List, PricedModel } from '../types';

type Mode = 'chat' | 'image' | 'speech';

interface Turn extends ChatMessage {
  id: number;
  model?: string;
  failed?: boolean;
}

let turnIds = 0;

/** The chat's state, kept by the page so it outlives a switch to another tab and back. */
function useChatState() {
  const [model, setModel] = useState('');
  const [turns, setTurns] = useState<Turn[]>([]);
  const [draft, setDraft] = useState('');
  const [error, setError] = useState<string | undefined>(undefined);
  const [streaming, setStreaming] = useState(false);
  const [system, setSystem] = useState('');
  const [temperature, setTemperature] = useState('');
  const [maxTokens, setMaxTokens] = useState('');
  const abort = useRef<AbortController | undefined>(undefined);
  useEffect(() => () => abort.current?.abort(), []);
  return { model, setModel, turns, setTurns, draft, setDraft, error, setError, streaming, setStreaming, abort, system, setSystem, temperature, setTemperature, maxTokens, setMaxTokens };
}

function Chat({ models, loading, state }: { models: PricedModel[]; loading: boolean; state: ReturnType<typeof useChatState> }) {
  const { refreshAccount } = useApp();
  const { model, setModel, turns, setTurns, draft, setDraft, error, setError, streaming, setStreaming, abort, system, setSystem, temperature, setTemperature, maxTokens, setMaxTokens } = state;
  const log = useRef<HTMLDivElement>(null);

  useEffect(() => {
    if (!model || !models.some((m) => m.id === model)) setModel(preferred(models, ['mock-chat', 'gpt-4o-mini', 'gpt-4.1-mini']));
  }, [models]);
  useEffect(() => {
    const el = log.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [turns]);

  const send = async () => {
    const text = draft.trim();
    if (streaming) return;
    if (!text) {
      document.getElementById('chat-message')?.focus();
      return;
    }
    if (!model) {
      setError('Pick a model first.');
      return;
    }
    // The settings, checked here with the limits the API holds them to.
    const temp = temperature.trim() === '' ? undefined : Number(temperature);
    if (temp !== undefined && !(Number.isFinite(temp) && temp >= 0 && temp <= 2)) {
      setError('Temperature must be a number from 0 to 2.');
      return;
    }
    const max = maxTokens.trim() === '' ? undefined : Number(maxTokens);
    if (max !== undefined && !(Number.isInteger(max) && max >= 1)) {
      setError('Max tokens must be a whole number of at least 1.');
      return;
    }
    setError(undefined);
    const history: ChatMessage[] = turns.filter((t) => !t.failed).map(({ role, content }) => ({ role, content }));
    const user: Turn = { id: ++turnIds, role: 'user', content: text };
    const reply: Turn = { id: ++turnIds, role: 'assistant', content: '', model };
    setTurns((current) => [...current, user, reply]);
    setDraft('');
    setStreaming(true);
    const controller = new AbortController();
    abort.current = controller;
    let received = '';
    const append = (delta: string) => {
      received += delta;
      setTurns((current) => current.map((t) => (t.id === reply.id ? { ...t, content: t.content + delta } : t)));
    };
    try {
      const instructions: ChatMessage[] = system.trim() ? [{ role: 'system', content: system.trim() }] : [];
      await streamChat(
        {
          model,
          messages: [...instructions, ...history, { role: 'user', content: text }],
          ...(temp !== undefined ? { temperature: temp } : {}),
          ...(max !== undefined ? { max_tokens: max } : {}),
        },
        append,
        controller.signal,
      );
    } catch (caught) {
      if (isAbort(caught)) {
        if (!received) setTurns((current) => current.filter((t) => t.id !== reply.id));
      } else {
        setError(messageOf(caught));
        // A reply that never started is dropped with its question, which goes back into the box.
        if (received) {
          setTurns((current) => current.map((t) => (t.id === reply.id ? { ...t, failed: true } : t)));
        } else {
          setTurns((current) => current.filter((t) => t.id !== reply.id && t.id !== user.id));
          setDraft((d) => d || text);
        }
      }
    } finally {
      setStreaming(false);
      abort.current = undefined;
      refreshAccount();
    }
  };

  const onSubmit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    void send();
  };
  const onKeyDown = (event: TargetedKeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      void send();
    }
  };

  return (
    <div class="playground">
      <div class="playground-side">
        <ModelSelect id="chat-model" models={models} value={model} onChange={setModel} loading={loading} />
        <div class="field">
          <label for="chat-system">System prompt</label>
          <textarea id="chat-system" rows={3} value={system} onInput={(e) => setSystem(e.currentTarget.value)} placeholder="e.g. You are a terse assistant." />
        </div>
        {/* Side by side: on a phone the settings stay short and the conversation starts on the first screen. */}
        <div class="field-pair">
          <div class="field">
            <label for="chat-temperature">Temperature</label>
            <input
              id="chat-temperature"
              type="number"
              min="0"
              max="2"
              step="0.1"
              inputMode="decimal"
              value={temperature}
              onInput={(e) => setTemperature(e.currentTarget.value)}
              placeholder="Default"
              aria-describedby="chat-settings-hint"
            />
          </div>
          <div class="field">
            <label for="chat-max-tokens">Max tokens</label>
            <input
              id="chat-max-tokens"
              type="number"
              min="1"
              step="1"
              inputMode="numeric"
              value={maxTokens}
              onInput={(e) => setMaxTokens(e.currentTarget.value)}
              placeholder="Default"
              aria-describedby="chat-settings-hint"
            />
          </div>
        </div>
        <p class="field-hint" id="chat-settings-hint">
          Temperature from 0 to 2. Empty: the model's default.
        </p>
        <p class="field-hint">Billed to your account's Playground key.</p>
      </div>
      <div class="chat card">
        <div class="chat-log" ref={log} role="log" aria-label="Conversation" aria-live="polite" aria-busy={streaming}>
          {turns.length === 0 && <p class="chat-empty">Send a message to start a conversation.</p>}
          {turns.map((turn) => (
            <div key={turn.id} class={`bubble bubble-${turn.role} ${turn.failed ? 'bubble-failed' : ''}`}>
              <span class="bubble-who">{turn.role === 'user' ? 'You' : turn.model}</span>
              <div class="bubble-text" data-role={turn.role}>
                {turn.content}
                {turn.role === 'assistant' && streaming && turn.id === turns[turns.length - 1]?.id && <span class="caret" aria-hidden="true" />}
              </div>
            </div>
          ))}
        </div>
        <form class="chat-form" onSubmit={onSubmit}>
          <ErrorMessage message={error} onDismiss={() => setError(undefined)} />
          <div class="field">
            <label for="chat-message">Message</label>
            <textarea id="chat-message" rows={3} value={draft} onInput={(e) => setDraft(e.currentTarget.value)} onKeyDown={onKeyDown} placeholder="Ask anything…" aria-describedby="chat-message-hint" />
            <p class="field-hint" id="chat-message-hint">
              Enter sends, Shift+Enter starts a new line.
            </p>
          </div>
          <div class="form-actions">
            <button
              type="button"
              class="button button-secondary"
              onClick={() => {
                abort.current?.abort();
                setTurns([]);
                setError(undefined);
              }}
              disabled={turns.length === 0 && !streaming}
            >
              Clear
            </button>
            {streaming && (
              <button type="button" class="button button-secondary" onClick={() => abort.current?.abort()}>
                Stop
              </button>
            )}
            <button type="submit" class="button button-primary" disabled={streaming}>
              {streaming && <Spinner />}
              Send
            </button>
          </div>
        </form>
      </div>
    </div>
  );
}

interface GeneratedImage {
  src: string;
  prompt: string;
  revised?: string;
}

/** The image form's state, kept by the page so it outlives a switch to another tab and back. */
function useImageState() {
  const [model, setModel] = useState('');
  const [prompt, setPrompt] = useState('');
  const [imageSize, setImageSize] = useState('');
  const [quality, setQuality] = useState('');
  const [images, setImages] = useState<GeneratedImage[]>([]);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  return { model, setModel, prompt, setPrompt, imageSize, setImageSize, quality, setQuality, images, setImages, error, setError, busy, setBusy };
}

function Images({ models, loading, state }: { models: PricedModel[]; loading: boolean; state: ReturnType<typeof useImageState> }) {
  const { refreshAccount } = useApp();
  const { model, setModel, prompt, setPrompt, imageSize, setImageSize, quality, setQuality, images, setImages, error, setError, busy, setBusy } = state;

  useEffect(() => {
    if (!model || !models.some((m) => m.id === model)) setModel(preferred(models, ['mock-image', 'gpt-image-1', 'dall-e-3']));
  }, [models]);
  const chosen = models.find((m) => m.id === model);
  const sizes = chosen?.image_sizes ?? [];
  const qualities = chosen?.image_qualities ?? [];
  useEffect(() => {
    if (!sizes.includes(imageSize)) setImageSize(sizes.find((s) => s !== 'auto') ?? sizes[0] ?? '');
    if (quality && !qualities.includes(quality)) setQuality('');
  }, [model, chosen]);

  const generate = async (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    const text = prompt.trim();
    if (busy) return;
    if (!text) {
      setError('Describe the image to generate.');
      return;
    }
    setBusy(true);
    setError(undefined);
    try {
      const body: Record<string, unknown> = { model, prompt: text, n: 1 };
      if (imageSize) body.size = imageSize;
      if (quality) body.quality = quality;
      // GPT image models always answer base64 and take no response_format; the others are asked for it.
      if (!/^gpt-image/.test(model)) body.response_format = 'b64_json';
      const answer = await api<{ data: { url?: string; b64_json?: string; revised_prompt?: string }[] }>('POST', '/playground/images/generations', body);
      const made = answer.data
        .map((item) => ({
          src: item.url ?? (item.b64_json ? `data:image/png;base64,${item.b64_json}` : ''),
          prompt: text,
          ...(item.revised_prompt ? { revised: item.revised_prompt } : {}),
        }))
        .filter((item) => item.src);
      setImages((current) => [...made, ...current].slice(0, 12));
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setBusy(false);
      refreshAccount();
    }
  };

  return (
    <div class="playground">
      <form class="playground-side image-form" onSubmit={generate}>
        <ModelSelect id="image-model" models={models} value={model} onChange={setModel} loading={loading} />
        <div class="field">
          <label for="image-prompt">Prompt</label>
          <textarea id="image-prompt" rows={4} value={prompt} onInput={(e) => setPrompt(e.currentTarget.value)} placeholder="A lighthouse on a cliff at dawn, watercolor" />
        </div>
        <div class="field">
          <label for="image-size">Size</label>
          <select id="image-size" value={imageSize} onChange={(e) => setImageSize(e.currentTarget.value)} disabled={sizes.length === 0}>
            {sizes.length === 0 && <option value="">Model default</option>}
            {sizes.map((s) => (
              <option value={s} key={s}>
                {s === 'auto' ? 'Auto' : size(s)}
              </option>
            ))}
          </select>
        </div>
        {qualities.length > 0 && (
          <div class="field">
            <label for="image-quality">Quality</label>
            <select id="image-quality" value={quality} onChange={(e) => setQuality(e.currentTarget.value)}>
              <option value="">Model default</option>
              {qualities.map((q) => (
                <option value={q} key={q}>
                  {q}
                </option>
              ))}
            </select>
          </div>
        )}
        <ErrorMessage message={error} />
        <button type="submit" class="button button-primary button-block" disabled={busy || !model}>
          {busy && <Spinner />}
          Generate
        </button>
      </form>
      <section class="image-results card" aria-label="Generated images" aria-busy={busy}>
        {busy && (
          <div class="image-tile image-pending">
            <Spinner />
            <span>Generating…</span>
          </div>
        )}
        {images.map((image, i) => (
          <figure class="image-tile" key={`${i}-${image.src.slice(-24)}`}>
            <img src={image.src} alt={image.prompt} loading="lazy" decoding="async" />
            <figcaption>{image.revised ?? image.prompt}</figcaption>
          </figure>
        ))}
        {!busy && images.length === 0 && <p class="chat-empty">Generated images appear here.</p>}
      </section>
    </div>
  );
}

export function PlaygroundPage() {
  useTitle('Playground');
  const pricing = useApi<List<PricedModel>>('/pricing');
  const [mode, setMode] = useState<Mode>('chat');
  const chat = useChatState();
  const image = useImageState();
  const speech = useSpeechState();
  const all = pricing.data?.data ?? [];
  const chatModels = useMemo(() => all.filter((m) => m.capability === 'chat' || m.capability === 'reasoning').sort((a, b) => a.id.localeCompare(b.id)), [pricing.data]);
  const imageModels = useMemo(() => all.filter((m) => m.capability === 'image').sort((a, b) => a.id.localeCompare(b.id)), [pricing.data]);
  const speechModels = useMemo(() => all.filter((m) => m.capability === 'speech').sort((a, b) => a.id.localeCompare(b.id)), [pricing.data]);

  return (
    <>
      <PageHeader
        title="Playground"
        description="Try the models with your account. Requests are billed like any other."
        actions={
          <div class="segmented" role="group" aria-label="Mode">
            <button type="button" aria-pressed={mode === 'chat'} onClick={() => setMode('chat')}>
              Chat
            </button>
            <button type="button" aria-pressed={mode === 'image'} onClick={() => setMode('image')}>
              Image
            </button>
            <button type="button" aria-pressed={mode === 'speech'} onClick={() => setMode('speech')}>
              Speech
            </button>
          </div>
        }
      />
      <ErrorMessage message={pricing.error} />
      {/* Only the chosen mode is rendered: each has its own field labelled Model. */}
      {mode === 'chat' && <Chat models={chatModels} loading={pricing.loading} state={chat} />}
      {mode === 'image' && <Images models={imageModels} loading={pricing.loading} state={image} />}
      {mode === 'speech' && <Speech models={speechModels} loading={pricing.loading} state={speech} />}
    </>
  );
}
