import type { TargetedKeyboardEvent, TargetedSubmitEvent } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { isAbort, messageOf, playgroundJson, streamChat, type AnswerUsage, type ChatMessage } from '../api';
import { useApp } from '../app-context';
import { ErrorMessage, PageHeader, Spinner, useApi, useTitle } from '../components/ui';
import { failureOf, RequestErrorMessage, type Failure } from '../components/request-error';
import { count, money, size } from '../format';
import { ModelSelect, useModelChoice } from '../components/model-select';
import { Link } from '../router';
import {
  activityAddress,
  answeredAt,
  settledRow,
  Speech,
  useSpeechState,
  type Answered,
  type CostState,
} from './playground-speech';
import type { List, PricedModel } from '../types';

type Mode = 'chat' | 'image' | 'speech';

interface Turn extends ChatMessage {
  id: number;
  model?: string;
  failed?: boolean;
  /** An answer's request, usage (from the stream's last chunk) and cost (from the request log). */
  answer?: AnswerFacts;
}

/** What an answer shows under it: the tokens, the cost as the request log has it, and a link to its Activity row. */
interface AnswerFacts extends Answered {
  usage: AnswerUsage | null;
  cost: CostState;
}

/**
 * Reads an answer's request-log row until it is settled, then hands it over (or says it was not in by the deadline).
 * The cost is the log's, so what the page shows is what Activity and Usage show; the stream's own usage is shown
 * meanwhile, and the log's tokens replace it once in.
 */
async function readCost(
  answer: Answered,
  signal: AbortSignal,
  update: (cost: CostState) => void,
  settled: () => void,
): Promise<void> {
  if (!answer.requestId) return update({ state: 'late' });
  try {
    const row = await settledRow(answer, signal);
    update(row ? { state: 'settled', row } : { state: 'late' });
    if (row) settled();
  } catch (caught) {
    if (!isAbort(caught)) update({ state: 'failed', message: messageOf(caught) });
  }
}

/** The line under an answer: tokens in and out, its cost, and a link to its row on the Activity page. */
function AnswerMeta({ answer }: { answer: AnswerFacts }) {
  const { cost } = answer;
  const row = cost.state === 'settled' ? cost.row : undefined;
  const tokens = row
    ? { in: row.input_tokens, out: row.output_tokens }
    : answer.usage
      ? { in: answer.usage.prompt_tokens, out: answer.usage.completion_tokens }
      : undefined;
  let amount = <span class="muted">Cost: reading…</span>;
  if (row) {
    amount = (
      <strong class="answer-cost" data-cost-micros={row.cost_micros}>
        Cost: {money(row.cost_usd)}
      </strong>
    );
  } else if (cost.state === 'late') {
    amount = <span class="muted">Cost: not in the log yet</span>;
  } else if (cost.state === 'failed') {
    amount = <span class="muted">Cost: could not be read ({cost.message})</span>;
  }
  return (
    <p class="answer-meta" aria-live="polite">
      {tokens && (tokens.in > 0 || tokens.out > 0) && (
        <span class="answer-tokens" data-input-tokens={tokens.in} data-output-tokens={tokens.out}>
          {count(tokens.in)} tokens in / {count(tokens.out)} out
        </span>
      )}
      {row && row.images > 0 && (
        <span class="answer-images">
          {count(row.images)} image{row.images === 1 ? '' : 's'}
        </span>
      )}
      {amount}
      {row?.cache === 'hit' && <span class="muted">from the response cache</span>}
      {answer.requestId && (
        <Link href={activityAddress(answer.model, answer.requestId)} class="answer-activity">
          See it in Activity
        </Link>
      )}
    </p>
  );
}

let turnIds = 0;

/** The chat's state, kept by the page so it outlives a switch to another tab and back. */
function useChatState() {
  const [model, setModel] = useState('');
  const [turns, setTurns] = useState<Turn[]>([]);
  const [draft, setDraft] = useState('');
  const [error, setError] = useState<Failure | undefined>(undefined);
  const [streaming, setStreaming] = useState(false);
  const [system, setSystem] = useState('');
  const [temperature, setTemperature] = useState('');
  const [maxTokens, setMaxTokens] = useState('');
  const abort = useRef<AbortController | undefined>(undefined);
  // The answers' costs are read for as long as the page is open (a Stop or a Clear stops only the stream).
  const reading = useRef(new AbortController());
  useEffect(
    () => () => {
      abort.current?.abort();
      reading.current.abort();
    },
    [],
  );
  return {
    model,
    setModel,
    turns,
    setTurns,
    draft,
    setDraft,
    error,
    setError,
    streaming,
    setStreaming,
    abort,
    reading,
    system,
    setSystem,
    temperature,
    setTemperature,
    maxTokens,
    setMaxTokens,
  };
}

function Chat({
  models,
  loading,
  state,
}: {
  models: PricedModel[];
  loading: boolean;
  state: ReturnType<typeof useChatState>;
}) {
  const { refreshAccount } = useApp();
  const {
    model,
    setModel,
    turns,
    setTurns,
    draft,
    setDraft,
    error,
    setError,
    streaming,
    setStreaming,
    abort,
    reading,
    system,
    setSystem,
    temperature,
    setTemperature,
    maxTokens,
    setMaxTokens,
  } = state;
  const log = useRef<HTMLDivElement>(null);

  useModelChoice(models, setModel, ['mock-chat', 'gpt-4o-mini', 'gpt-4.1-mini']);
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
      setError({ message: 'Pick a model first.' });
      return;
    }
    // The settings, checked here with the limits the API holds them to.
    const temp = temperature.trim() === '' ? undefined : Number(temperature);
    if (temp !== undefined && !(Number.isFinite(temp) && temp >= 0 && temp <= 2)) {
      setError({ message: 'Temperature must be a number from 0 to 2.' });
      return;
    }
    const max = maxTokens.trim() === '' ? undefined : Number(maxTokens);
    if (max !== undefined && !(Number.isInteger(max) && max >= 1)) {
      setError({ message: 'Max tokens must be a whole number of at least 1.' });
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
    const setAnswer = (change: (answer: AnswerFacts) => AnswerFacts) =>
      setTurns((current) =>
        current.map((t) => (t.id === reply.id && t.answer ? { ...t, answer: change(t.answer) } : t)),
      );
    let answered: AnswerFacts | undefined;
    try {
      const instructions: ChatMessage[] = system.trim() ? [{ role: 'system', content: system.trim() }] : [];
      const facts = await streamChat(
        {
          model,
          messages: [...instructions, ...history, { role: 'user', content: text }],
          ...(temp !== undefined ? { temperature: temp } : {}),
          ...(max !== undefined ? { max_tokens: max } : {}),
        },
        append,
        controller.signal,
      );
      answered = {
        model,
        requestId: facts.requestId,
        answeredAt: answeredAt(facts.date),
        usage: facts.usage,
        cost: { state: 'pending' },
      };
      const answer = answered;
      setTurns((current) => current.map((t) => (t.id === reply.id ? { ...t, answer } : t)));
    } catch (caught) {
      if (isAbort(caught)) {
        if (!received) setTurns((current) => current.filter((t) => t.id !== reply.id));
      } else {
        setError(failureOf(caught));
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
    // Its cost, from the request log once the request is settled; the balance beside the account then too.
    if (answered)
      await readCost(answered, reading.current.signal, (cost) => setAnswer((a) => ({ ...a, cost })), refreshAccount);
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
          <textarea
            id="chat-system"
            rows={3}
            value={system}
            onInput={(e) => setSystem(e.currentTarget.value)}
            placeholder="e.g. You are a terse assistant."
          />
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
                {turn.role === 'assistant' && streaming && turn.id === turns[turns.length - 1]?.id && (
                  <span class="caret" aria-hidden="true" />
                )}
              </div>
              {turn.answer && <AnswerMeta answer={turn.answer} />}
            </div>
          ))}
        </div>
        <form class="chat-form" onSubmit={onSubmit}>
          <RequestErrorMessage failure={error} onDismiss={() => setError(undefined)} />
          <div class="field">
            <label for="chat-message">Message</label>
            <textarea
              id="chat-message"
              rows={3}
              value={draft}
              onInput={(e) => setDraft(e.currentTarget.value)}
              onKeyDown={onKeyDown}
              placeholder="Ask anything…"
              aria-describedby="chat-message-hint"
            />
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
  /** The request that made it (one request may make several): its tokens, cost and Activity row. */
  answer: AnswerFacts;
}

/** The image form's state, kept by the page so it outlives a switch to another tab and back. */
function useImageState() {
  const [model, setModel] = useState('');
  const [prompt, setPrompt] = useState('');
  const [imageSize, setImageSize] = useState('');
  const [quality, setQuality] = useState('');
  const [images, setImages] = useState<GeneratedImage[]>([]);
  const [error, setError] = useState<Failure | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const reading = useRef(new AbortController());
  useEffect(() => () => reading.current.abort(), []);
  return {
    model,
    setModel,
    prompt,
    setPrompt,
    imageSize,
    setImageSize,
    quality,
    setQuality,
    images,
    setImages,
    error,
    setError,
    busy,
    setBusy,
    reading,
  };
}

function Images({
  models,
  loading,
  state,
}: {
  models: PricedModel[];
  loading: boolean;
  state: ReturnType<typeof useImageState>;
}) {
  const { refreshAccount } = useApp();
  const {
    model,
    setModel,
    prompt,
    setPrompt,
    imageSize,
    setImageSize,
    quality,
    setQuality,
    images,
    setImages,
    error,
    setError,
    busy,
    setBusy,
    reading,
  } = state;

  useModelChoice(models, setModel, ['mock-image', 'gpt-image-1', 'dall-e-3']);
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
      setError({ message: 'Describe the image to generate.' });
      return;
    }
    setBusy(true);
    setError(undefined);
    let answered: AnswerFacts | undefined;
    try {
      const body: Record<string, unknown> = { model, prompt: text, n: 1 };
      if (imageSize) body.size = imageSize;
      if (quality) body.quality = quality;
      // GPT image models always answer base64 and take no response_format; the others are asked for it.
      if (!/^gpt-image/.test(model)) body.response_format = 'b64_json';
      const answer = await playgroundJson<{ data: { url?: string; b64_json?: string; revised_prompt?: string }[] }>(
        '/playground/images/generations',
        body,
        reading.current.signal,
      );
      const facts: AnswerFacts = {
        model,
        requestId: answer.requestId,
        answeredAt: answeredAt(answer.date),
        usage: null,
        cost: { state: 'pending' },
      };
      answered = facts;
      const made = answer.body.data
        .map((item) => ({
          src: item.url ?? (item.b64_json ? `data:image/png;base64,${item.b64_json}` : ''),
          prompt: text,
          ...(item.revised_prompt ? { revised: item.revised_prompt } : {}),
          answer: facts,
        }))
        .filter((item) => item.src);
      setImages((current) => [...made, ...current].slice(0, 12));
    } catch (caught) {
      if (!isAbort(caught)) setError(failureOf(caught));
    } finally {
      setBusy(false);
      refreshAccount();
    }
    // Its cost, from the request log once settled, on each image the request made.
    if (answered) {
      const requestId = answered.requestId;
      const update = (cost: CostState) =>
        setImages((current) =>
          current.map((image) =>
            image.answer.requestId === requestId ? { ...image, answer: { ...image.answer, cost } } : image,
          ),
        );
      await readCost(answered, reading.current.signal, update, refreshAccount);
    }
  };

  return (
    <div class="playground">
      <form class="playground-side image-form" onSubmit={generate}>
        <ModelSelect id="image-model" models={models} value={model} onChange={setModel} loading={loading} />
        <div class="field">
          <label for="image-prompt">Prompt</label>
          <textarea
            id="image-prompt"
            rows={4}
            value={prompt}
            onInput={(e) => setPrompt(e.currentTarget.value)}
            placeholder="A lighthouse on a cliff at dawn, watercolor"
          />
        </div>
        <div class="field">
          <label for="image-size">Size</label>
          <select
            id="image-size"
            value={imageSize}
            onChange={(e) => setImageSize(e.currentTarget.value)}
            disabled={sizes.length === 0}
          >
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
        <RequestErrorMessage failure={error} />
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
            <figcaption>
              {image.revised ?? image.prompt}
              <AnswerMeta answer={image.answer} />
            </figcaption>
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
  const chatModels = useMemo(
    () =>
      all
        .filter((m) => m.capability === 'chat' || m.capability === 'reasoning')
        .sort((a, b) => a.id.localeCompare(b.id)),
    [pricing.data],
  );
  const imageModels = useMemo(
    () => all.filter((m) => m.capability === 'image').sort((a, b) => a.id.localeCompare(b.id)),
    [pricing.data],
  );
  const speechModels = useMemo(
    () => all.filter((m) => m.capability === 'speech').sort((a, b) => a.id.localeCompare(b.id)),
    [pricing.data],
  );

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
