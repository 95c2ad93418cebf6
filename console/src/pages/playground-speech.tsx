import type { TargetedSubmitEvent } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, isAbort, messageOf, speak } from '../api';
import { useApp } from '../app-context';
import { ModelSelect, useModelChoice } from '../components/model-select';
import { Spinner } from '../components/ui';
import { failureOf, RequestErrorMessage, type Failure } from '../components/request-error';
import { count, money, number } from '../format';
import { Link } from '../router';
import type { PricedModel, RequestPage, RequestView } from '../types';

/*
 * The Playground's Speech tab: text spoken by a speech model through
 * `/v1/audio/speech` (the playground's route, billed to the account's
 * Playground key), played in the page from a blob URL, with what it cost
 * read back from the request log by the answer's request id, as the
 * Activity page shows it, and a link to that row there.
 */

/** `input`'s limit, as the API holds it. */
export const maxSpeechCharacters = 4096;

/** The voices of OpenAI's speech models, which the mock takes too. */
const openaiVoices = [
  'alloy',
  'ash',
  'ballad',
  'coral',
  'echo',
  'fable',
  'onyx',
  'nova',
  'sage',
  'shimmer',
  'verse',
  'marin',
  'cedar',
];
/** Gemini's prebuilt voices. */
const geminiVoices = [
  'Kore',
  'Puck',
  'Zephyr',
  'Charon',
  'Fenrir',
  'Leda',
  'Orus',
  'Aoede',
  'Callirrhoe',
  'Autonoe',
  'Enceladus',
  'Iapetus',
  'Umbriel',
  'Algieba',
  'Despina',
  'Erinome',
  'Algenib',
  'Rasalgethi',
  'Laomedeia',
  'Achernar',
  'Alnilam',
  'Schedar',
  'Gacrux',
  'Pulcherrima',
  'Achird',
  'Zubenelgenubi',
  'Vindemiatrix',
  'Sadachbia',
  'Sadaltager',
  'Sulafat',
];
const allFormats = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'];
const formatLabels: Record<string, string> = {
  mp3: 'MP3',
  opus: 'Opus',
  aac: 'AAC',
  flac: 'FLAC',
  wav: 'WAV',
  pcm: 'PCM (24 kHz)',
};

/** The voices a model takes: the catalog's list when it has one, else its vendor's. */
function voicesOf(model: PricedModel | undefined): string[] {
  if (!model) return [];
  if (model.speech_voices?.length) return model.speech_voices;
  return model.vendor === 'google' ? geminiVoices : openaiVoices;
}

/** The formats a model can be given: the catalog's list when it has one, else every format the API names. */
function formatsOf(model: PricedModel | undefined): string[] {
  if (!model) return [];
  return model.speech_formats?.length ? model.speech_formats : allFormats;
}

/**
 * Whether a model takes an option (`instructions`, `speed`): the catalog's word; where it says nothing, what OpenAI's
 * models take (no instructions for tts-1 and tts-1-hd).
 */
function takes(model: PricedModel | undefined, option: 'instructions' | 'speed'): boolean {
  if (!model) return false;
  if (model.speech_options) return model.speech_options.includes(option);
  return option === 'speed' || !/^tts-1(-hd)?$/.test(model.id);
}

/** One spoken text: its audio and where its cost is read. */
interface Spoken {
  url: string;
  format: string;
  model: string;
  voice: string;
  characters: number;
  /** The clip's own length (seconds), as the browser reads it from the audio once its metadata is in. */
  seconds?: number;
  requestId: string | null;
  /**
   * The server's clock when it answered (unix seconds), so the log is read from then whatever the browser's clock says.
   */
  answeredAt: number;
}

/** What the request log says of it: still to come, in and settled, or not in by the deadline. */
export type CostState =
  | { state: 'pending' }
  | { state: 'settled'; row: RequestView }
  | { state: 'late' }
  | { state: 'failed'; message: string };

/** How long the page waits for the request's row to be settled (it is written a moment after the answer). */
const costDeadlineMs = 20_000;

/**
 * The tab's state, kept by the page so it outlives a switch to another tab and back; its blob URL revoked when replaced
 * or left.
 */
export function useSpeechState() {
  const [model, setModel] = useState('');
  const [voice, setVoice] = useState('');
  const [format, setFormat] = useState('mp3');
  const [speed, setSpeed] = useState('');
  const [instructions, setInstructions] = useState('');
  const [text, setText] = useState('');
  const [error, setError] = useState<Failure | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const [spoken, setSpokenState] = useState<Spoken | undefined>(undefined);
  const [cost, setCost] = useState<CostState | undefined>(undefined);
  const abort = useRef<AbortController | undefined>(undefined);
  const current = useRef<string | undefined>(undefined);
  const setSpoken = (next: Spoken | undefined) => {
    if (current.current && current.current !== next?.url) URL.revokeObjectURL(current.current);
    current.current = next?.url;
    setSpokenState(next);
  };
  useEffect(
    () => () => {
      abort.current?.abort();
      if (current.current) URL.revokeObjectURL(current.current);
    },
    [],
  );
  return {
    model,
    setModel,
    voice,
    setVoice,
    format,
    setFormat,
    speed,
    setSpeed,
    instructions,
    setInstructions,
    text,
    setText,
    error,
    setError,
    busy,
    setBusy,
    spoken,
    setSpoken,
    cost,
    setCost,
    abort,
  };
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(new DOMException('Aborted', 'AbortError'));
      },
      { once: true },
    );
  });

/**
 * An answer whose cost is read from the request log: its model, its request's id, and when the server answered (unix
 * seconds).
 */
export interface Answered {
  model: string;
  requestId: string | null;
  answeredAt: number;
}

/** The server's clock of an answer (its Date header) in unix seconds, else the browser's. */
export function answeredAt(date: string | null): number {
  const parsed = Date.parse(date ?? '');
  return Math.floor((Number.isFinite(parsed) ? parsed : Date.now()) / 1000);
}

/**
 * The request's row once settled, read from the request log as the Activity page reads it; undefined when not in by the
 * deadline.
 */
export async function settledRow(spoken: Answered, signal: AbortSignal): Promise<RequestView | undefined> {
  if (!spoken.requestId) return undefined;
  const query = new URLSearchParams({ since: String(spoken.answeredAt - 60), model: spoken.model, limit: '100' });
  const deadline = Date.now() + costDeadlineMs;
  for (let wait = 200; ; wait = Math.min(wait * 1.5, 1500)) {
    const page = await api<RequestPage>('GET', `/requests?${query}`, undefined, { signal });
    const row = page.data.find((r) => r.id === spoken.requestId);
    if (row?.settled) return row;
    if (Date.now() + wait > deadline) return undefined;
    await sleep(wait, signal);
  }
}

/** The Activity page's address that opens this request's details. */
export function activityAddress(model: string, requestId: string): string {
  return `/console/activity?${new URLSearchParams({ model, request: requestId })}`;
}

function CostLine({ spoken, cost }: { spoken: Spoken; cost: CostState | undefined }) {
  const parts: string[] = [`${count(spoken.characters)} character${spoken.characters === 1 ? '' : 's'}`];
  // The clip's real length; what is billed is counted in whole seconds (a 2.16 s clip is billed as 3 s), said as such
  // below.
  if (spoken.seconds !== undefined) parts.push(`${number(spoken.seconds)} s long`);
  let amount = <span class="muted">Cost: reading…</span>;
  if (cost?.state === 'settled') {
    const row = cost.row;
    amount = (
      <strong class="speech-cost" data-cost-micros={row.cost_micros}>
        Cost: {money(row.cost_usd)}
      </strong>
    );
    if (row.input_tokens || row.output_tokens)
      parts.push(`${count(row.input_tokens)} tokens in / ${count(row.output_tokens)} out`);
    if (row.audio_seconds) parts.push(`${count(row.audio_seconds)} s billed (whole seconds)`);
  } else if (cost?.state === 'late') {
    amount = <span class="muted">Cost: not in the log yet</span>;
  } else if (cost?.state === 'failed') {
    amount = <span class="muted">Cost: could not be read ({cost.message})</span>;
  }
  return (
    <p class="speech-meta" aria-live="polite">
      {amount}
      {parts.map((part) => (
        <span key={part}>{part}</span>
      ))}
      {spoken.requestId && (
        <Link href={activityAddress(spoken.model, spoken.requestId)} class="speech-activity">
          See it in Activity
        </Link>
      )}
    </p>
  );
}

export function Speech({
  models,
  loading,
  state,
}: {
  models: PricedModel[];
  loading: boolean;
  state: ReturnType<typeof useSpeechState>;
}) {
  const { refreshAccount } = useApp();
  const {
    model,
    setModel,
    voice,
    setVoice,
    format,
    setFormat,
    speed,
    setSpeed,
    instructions,
    setInstructions,
    text,
    setText,
    error,
    setError,
    busy,
    setBusy,
    spoken,
    setSpoken,
    cost,
    setCost,
    abort,
  } = state;

  useModelChoice(models, setModel, ['mock-speech', 'mock-tts', 'gpt-4o-mini-tts', 'tts-1']);
  const chosen = models.find((m) => m.id === model);
  const voices = voicesOf(chosen);
  const formats = formatsOf(chosen);
  const instructed = takes(chosen, 'instructions');
  const paced = takes(chosen, 'speed');
  useEffect(() => {
    // Read as they are now, not as this render saw them: a voice or format picked before this effect ran (it runs
    // after the paint that showed the model's choices) is kept when the model offers it.
    setVoice((current) => (voices.includes(current) ? current : (voices[0] ?? '')));
    setFormat((current) =>
      formats.includes(current) ? current : formats.includes('mp3') ? 'mp3' : (formats[0] ?? ''),
    );
  }, [model, chosen]);

  const submit = async (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy) return;
    const input = text.trim();
    if (!model) {
      setError({ message: 'Pick a model first.' });
      return;
    }
    if (!input) {
      setError({ message: 'Type the text to speak.' });
      document.getElementById('speech-text')?.focus();
      return;
    }
    if (text.length > maxSpeechCharacters) {
      setError({ message: `The text may be at most ${count(maxSpeechCharacters)} characters.` });
      return;
    }
    const pace = !paced || speed.trim() === '' ? undefined : Number(speed);
    if (pace !== undefined && !(Number.isFinite(pace) && pace >= 0.25 && pace <= 4)) {
      setError({ message: 'Speed must be a number from 0.25 to 4.' });
      return;
    }
    abort.current?.abort();
    const controller = new AbortController();
    abort.current = controller;
    setBusy(true);
    setError(undefined);
    let made: Spoken | undefined;
    try {
      const answer = await speak(
        {
          model,
          input,
          voice,
          response_format: format,
          ...(pace !== undefined ? { speed: pace } : {}),
          ...(instructed && instructions.trim() ? { instructions: instructions.trim() } : {}),
        },
        controller.signal,
      );
      made = {
        url: URL.createObjectURL(answer.audio),
        format,
        model,
        voice,
        characters: [...input].length,
        requestId: answer.requestId,
        answeredAt: answeredAt(answer.date),
      };
      setSpoken(made);
      setCost(made.requestId ? { state: 'pending' } : { state: 'late' });
    } catch (caught) {
      if (!isAbort(caught)) setError(failureOf(caught));
    } finally {
      setBusy(false);
      refreshAccount();
    }
    if (!made?.requestId || controller.signal.aborted) return;
    try {
      const row = await settledRow(made, controller.signal);
      setCost(row ? { state: 'settled', row } : { state: 'late' });
      // The balance shown beside the account, now that the request is settled.
      if (row) refreshAccount();
    } catch (caught) {
      if (!isAbort(caught)) setCost({ state: 'failed', message: messageOf(caught) });
    } finally {
      if (abort.current === controller) abort.current = undefined;
    }
  };

  const over = text.length > maxSpeechCharacters;
  return (
    <form class="playground speech" onSubmit={submit} noValidate>
      <div class="playground-side">
        <ModelSelect id="speech-model" models={models} value={model} onChange={setModel} loading={loading} />
        <div class="field-pair">
          <div class="field">
            <label for="speech-voice">Voice</label>
            <select
              id="speech-voice"
              value={voice}
              onChange={(e) => setVoice(e.currentTarget.value)}
              disabled={voices.length === 0}
            >
              {voices.map((v) => (
                <option value={v} key={v}>
                  {v[0]!.toUpperCase() + v.slice(1)}
                </option>
              ))}
            </select>
          </div>
          <div class="field">
            <label for="speech-format">Format</label>
            <select
              id="speech-format"
              value={format}
              onChange={(e) => setFormat(e.currentTarget.value)}
              disabled={formats.length === 0}
            >
              {formats.map((f) => (
                <option value={f} key={f}>
                  {formatLabels[f] ?? f}
                </option>
              ))}
            </select>
          </div>
        </div>
        {paced && (
          <div class="field">
            <label for="speech-speed">Speed</label>
            <input
              id="speech-speed"
              type="number"
              min="0.25"
              max="4"
              step="0.05"
              inputMode="decimal"
              value={speed}
              onInput={(e) => setSpeed(e.currentTarget.value)}
              placeholder="1"
              aria-describedby="speech-speed-hint"
            />
            <p class="field-hint" id="speech-speed-hint">
              From 0.25 to 4. Empty: normal speed.
            </p>
          </div>
        )}
        {instructed && (
          <div class="field">
            <label for="speech-instructions">Instructions</label>
            <textarea
              id="speech-instructions"
              rows={2}
              value={instructions}
              onInput={(e) => setInstructions(e.currentTarget.value)}
              placeholder="e.g. Speak calmly, like a radio host."
            />
          </div>
        )}
        <p class="field-hint">Billed to your account's Playground key.</p>
      </div>
      <div class="card speech-card">
        <div class="field">
          <label for="speech-text">Text</label>
          <textarea
            id="speech-text"
            rows={6}
            maxLength={maxSpeechCharacters}
            value={text}
            onInput={(e) => setText(e.currentTarget.value)}
            placeholder="Type what the voice should say…"
            aria-describedby="speech-text-count"
          />
          <p class={`field-hint speech-count ${over ? 'speech-count-over' : ''}`} id="speech-text-count">
            {count(text.length)} / {count(maxSpeechCharacters)} characters
          </p>
        </div>
        <RequestErrorMessage failure={error} onDismiss={() => setError(undefined)} />
        <div class="form-actions">
          {busy && (
            <button type="button" class="button button-secondary" onClick={() => abort.current?.abort()}>
              Stop
            </button>
          )}
          <button type="submit" class="button button-primary" disabled={busy || !model}>
            {busy && <Spinner />}
            Speak
          </button>
        </div>
        <section class="speech-result" aria-label="Spoken audio" aria-busy={busy}>
          {spoken ? (
            <>
              <audio
                controls
                preload="auto"
                src={spoken.url}
                class="speech-audio"
                aria-label={`${spoken.model}, voice ${spoken.voice}`}
                onLoadedMetadata={(event) => {
                  // A length the browser cannot tell (a stream's Infinity, NaN) is left unsaid.
                  const seconds = event.currentTarget.duration;
                  if (Number.isFinite(seconds) && seconds > 0 && spoken.seconds !== seconds)
                    setSpoken({ ...spoken, seconds });
                }}
              />
              <CostLine spoken={spoken} cost={cost} />
              <a
                class="speech-download"
                href={spoken.url}
                download={`speech.${spoken.format === 'pcm' ? 'wav' : spoken.format}`}
              >
                Download
              </a>
            </>
          ) : (
            <p class="chat-empty">{busy ? 'Speaking…' : 'The spoken text plays here.'}</p>
          )}
        </section>
      </div>
    </form>
  );
}
