/**
 * Gemini's speech models for tests, strict as Google's API takes them: `POST /v1beta/models/{model}:generateContent`
 * and `:streamGenerateContent?alt=sse` for its TTS models, the key in `x-goog-api-key`, a body of `contents` and
 * `generationConfig` only, `responseModalities: ["AUDIO"]` (anything else is the 400 Gemini answers for a TTS
 * model), one prebuilt voice among Gemini's 30 names, text parts only. The answer is 24 kHz 16-bit mono PCM as
 * Gemini sends it (`audio/L16;codec=pcm;rate=24000`, base64 in `inlineData`), a 330 Hz tone 50 ms a character,
 * streamed in `pieces` chunks (the last with `finishReason` and `usageMetadata`: a token per 4 characters in, 25
 * audio tokens a second out), or one body. Errors in Google's envelope.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { closeServer, listenOnLoopback } from './fake-server.js';

export const FAKE_GEMINI_TTS_MODELS = ['gemini-2.5-flash-preview-tts', 'gemini-2.5-pro-preview-tts'];
export const GEMINI_VOICES = [
  'Zephyr',
  'Puck',
  'Charon',
  'Kore',
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
const sampleRate = 24_000;

export interface FakeGeminiSpeechRequest {
  path: string;
  body: Record<string, unknown>;
  headers: IncomingMessage['headers'];
}

export interface FakeGeminiSpeech {
  /** The base URL a Gemini channel takes (before `/v1beta`). */
  url: string;
  requests: FakeGeminiSpeechRequest[];
  /** The PCM of each answer, in order. */
  pcms: Buffer[];
  usages: Array<{ promptTokenCount: number; candidatesTokenCount: number; totalTokenCount: number }>;
  reset(): void;
  close(): Promise<void>;
}

function googleError(res: ServerResponse, code: number, status: string, message: string): void {
  res.writeHead(code, { 'content-type': 'application/json; charset=UTF-8' });
  res.end(JSON.stringify({ error: { code, message, status } }));
}

/** Why Gemini would refuse this body, or undefined. */
function refusal(body: Record<string, unknown>): string | undefined {
  for (const key of Object.keys(body))
    if (key !== 'contents' && key !== 'generationConfig')
      return `Invalid JSON payload received. Unknown name "${key}": Cannot find field.`;
  const contents = body.contents as Array<{ role?: unknown; parts?: unknown }> | undefined;
  if (!Array.isArray(contents) || contents.length !== 1 || !Array.isArray(contents[0]!.parts))
    return '* GenerateContentRequest.contents: contents is not specified';
  const parts = contents[0]!.parts as Array<Record<string, unknown>>;
  if (
    parts.length === 0 ||
    !parts.every((part) => Object.keys(part).join() === 'text' && typeof part.text === 'string' && part.text !== '')
  )
    return 'A TTS model takes text parts only.';
  const config = body.generationConfig as Record<string, unknown> | undefined;
  if (!config) return 'The requested combination of response modalities (TEXT) is not supported by the model.';
  for (const key of Object.keys(config))
    if (key !== 'responseModalities' && key !== 'speechConfig')
      return `Invalid JSON payload received. Unknown name "${key}" at 'generation_config'.`;
  const modalities = config.responseModalities;
  if (!Array.isArray(modalities) || modalities.join() !== 'AUDIO')
    return `The requested combination of response modalities (${Array.isArray(modalities) ? modalities.join(', ') : 'TEXT'}) is not supported by the model.`;
  const voice = (config.speechConfig as { voiceConfig?: { prebuiltVoiceConfig?: { voiceName?: unknown } } } | undefined)
    ?.voiceConfig?.prebuiltVoiceConfig?.voiceName;
  if (voice !== undefined && (typeof voice !== 'string' || !GEMINI_VOICES.includes(voice)))
    return `Voice name ${String(voice)} is not supported.`;
  return undefined;
}

export async function startFakeGeminiSpeech(
  options: { apiKey?: string; pieces?: number; pauseMs?: number } = {},
): Promise<FakeGeminiSpeech> {
  const apiKey = options.apiKey ?? 'gemini-test-key';
  const pieces = options.pieces ?? 3;
  const pauseMs = options.pauseMs ?? 5;
  const requests: FakeGeminiSpeechRequest[] = [];
  const pcms: Buffer[] = [];
  const usages: FakeGeminiSpeech['usages'] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        const match = /^\/v1beta\/models\/([^/:]+):(generateContent|streamGenerateContent)(\?alt=sse)?$/.exec(
          req.url ?? '',
        );
        if (req.method !== 'POST' || !match) return googleError(res, 404, 'NOT_FOUND', `Unknown path ${req.url}`);
        const [, model, method, sse] = match;
        if (req.headers['x-goog-api-key'] !== apiKey)
          return googleError(res, 400, 'INVALID_ARGUMENT', 'API key not valid. Please pass a valid API key.');
        if (!FAKE_GEMINI_TTS_MODELS.includes(model!))
          return googleError(res, 404, 'NOT_FOUND', `models/${model} is not found for API version v1beta.`);
        let body: Record<string, unknown>;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
        } catch {
          return googleError(res, 400, 'INVALID_ARGUMENT', 'Invalid JSON payload received.');
        }
        requests.push({ path: req.url!, body, headers: req.headers });
        const refused = refusal(body);
        if (refused) return googleError(res, 400, 'INVALID_ARGUMENT', refused);
        const text = (body.contents as Array<{ parts: Array<{ text: string }> }>)[0]!.parts
          .map((part) => part.text)
          .join('');
        const characters = Array.from(text).length;
        const samples = Math.max(1200, Math.round(characters * 0.05 * sampleRate));
        const pcm = Buffer.alloc(samples * 2);
        for (let n = 0; n < samples; n++)
          pcm.writeInt16LE(Math.round(10_000 * Math.sin((2 * Math.PI * 330 * n) / sampleRate)), n * 2);
        pcms.push(pcm);
        const usage = {
          promptTokenCount: Math.ceil(characters / 4),
          candidatesTokenCount: Math.ceil((samples / sampleRate) * 25),
          totalTokenCount: 0,
        };
        usage.totalTokenCount = usage.promptTokenCount + usage.candidatesTokenCount;
        usages.push(usage);
        const chunk = (data: Buffer, last: boolean) => ({
          candidates: [
            {
              content: {
                role: 'model',
                parts: [
                  { inlineData: { mimeType: `audio/L16;codec=pcm;rate=${sampleRate}`, data: data.toString('base64') } },
                ],
              },
              ...(last ? { finishReason: 'STOP', index: 0 } : { index: 0 }),
            },
          ],
          ...(last
            ? {
                usageMetadata: {
                  ...usage,
                  promptTokensDetails: [{ modality: 'TEXT', tokenCount: usage.promptTokenCount }],
                  candidatesTokensDetails: [{ modality: 'AUDIO', tokenCount: usage.candidatesTokenCount }],
                },
              }
            : {}),
          modelVersion: model,
          responseId: 'fake-tts-response',
        });
        if (method === 'generateContent') {
          res.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
          return res.end(JSON.stringify(chunk(pcm, true)));
        }
        if (!sse) return googleError(res, 400, 'INVALID_ARGUMENT', 'The fake streams only with alt=sse.');
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        // Pieces of whole samples, as Gemini sends them.
        const size = Math.ceil(samples / pieces) * 2;
        for (let at = 0; at < pcm.length; at += size) {
          res.write(`data: ${JSON.stringify(chunk(pcm.subarray(at, at + size), at + size >= pcm.length))}\r\n\r\n`);
          await new Promise((resolve) => setTimeout(resolve, pauseMs));
          if (res.destroyed) return;
        }
        res.end();
      })();
    });
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    pcms,
    usages,
    reset() {
      requests.length = 0;
      pcms.length = 0;
      usages.length = 0;
    },
    close: () => closeServer(server),
  };
}
