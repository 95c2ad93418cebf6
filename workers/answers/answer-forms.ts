import type { CacheableAnswer, StoredEvent } from '../../shared/cache/index.js';
import { readSseFrame, sseDone, sseDoneData } from '../../shared/sse.js';
import { ChatStreamEncoder, encodeChatAnswer, type ChatEncoderOptions } from './chat-encoder.js';
import type { Answer, AnswerChoice, AnswerEvent } from './events.js';

/**
 * An answer in both of its client forms, for the response cache: the body a
 * plain request gets and the events a stream gets, made from one answer
 * whichever way the vendor was asked, so a stored stream answers a plain
 * request and the reverse.
 */

/** A stream's events folded into the plain answer they describe (a vendor's own chunks, `wire`, are not kept). */
export function foldAnswer(events: readonly AnswerEvent[]): Answer {
  const answer: Answer = { id: '', created: Math.floor(Date.now() / 1000), choices: [] };
  const choices = new Map<
    number,
    AnswerChoice & { calls: Map<number, { id: string; name: string; arguments: string }> }
  >();
  const choiceOf = (index: number) => {
    let choice = choices.get(index);
    if (!choice) {
      choice = { index, text: null, toolCalls: [], finishReason: 'stop', calls: new Map() };
      choices.set(index, choice);
    }
    return choice;
  };
  for (const event of events) {
    switch (event.type) {
      case 'start':
        answer.id = event.id;
        answer.created = event.created;
        if (event.model !== undefined) answer.model = event.model;
        if (event.systemFingerprint !== undefined) answer.systemFingerprint = event.systemFingerprint;
        if (event.serviceTier !== undefined) answer.serviceTier = event.serviceTier;
        break;
      case 'role':
        choiceOf(event.choice);
        break;
      case 'text': {
        const choice = choiceOf(event.choice);
        choice.text = (choice.text ?? '') + event.text;
        break;
      }
      case 'tool-call': {
        const calls = choiceOf(event.choice).calls;
        const call = calls.get(event.index) ?? { id: '', name: '', arguments: '' };
        if (event.id !== undefined) call.id = event.id;
        if (event.name !== undefined) call.name = event.name;
        call.arguments += event.arguments;
        calls.set(event.index, call);
        break;
      }
      case 'finish':
        choiceOf(event.choice).finishReason = event.reason;
        break;
      case 'usage':
        answer.usage = event.usage;
        break;
      case 'reasoning':
        break;
    }
  }
  answer.choices = [...choices.values()]
    .sort((a, b) => a.index - b.index)
    .map(({ calls, ...choice }) => ({
      ...choice,
      toolCalls: [...calls.entries()].sort((a, b) => a[0] - b[0]).map(([, call]) => call),
    }));
  return answer;
}

/** A plain answer as the events of a stream: what the stream encoder writes for it. */
export function answerEvents(answer: Answer): AnswerEvent[] {
  const events: AnswerEvent[] = [
    {
      type: 'start',
      id: answer.id,
      created: answer.created,
      ...(answer.model !== undefined ? { model: answer.model } : {}),
      ...(answer.systemFingerprint !== undefined ? { systemFingerprint: answer.systemFingerprint } : {}),
      ...(answer.serviceTier !== undefined ? { serviceTier: answer.serviceTier } : {}),
    },
  ];
  for (const choice of answer.choices) {
    events.push({ type: 'role', choice: choice.index });
    if (choice.text !== null && choice.text !== '')
      events.push({ type: 'text', choice: choice.index, text: choice.text });
    choice.toolCalls.forEach((call, index) =>
      events.push({
        type: 'tool-call',
        choice: choice.index,
        index,
        id: call.id,
        name: call.name,
        arguments: call.arguments,
      }),
    );
    events.push({ type: 'finish', choice: choice.index, reason: choice.finishReason });
  }
  return events;
}

/**
 * SSE frames as the encoders write them (`shared/sse.ts`: `id:`, maybe `event:`, one `data:` line of JSON), as
 * stored events without their numbers. Only such frames: JSON text holds no line break, so a blank line always
 * ends a frame.
 */
export function storedEvents(frames: string): StoredEvent[] {
  const events: StoredEvent[] = [];
  for (const frame of frames.split('\n\n')) {
    const { event, data } = readSseFrame(frame);
    if (data !== undefined && data !== sseDoneData)
      events.push(event === undefined ? { d: data } : { e: event, d: data });
  }
  return events;
}

/**
 * A chat or legacy completion answer in both forms: the body (the vendor's own when it was one), and the chunks
 * the stream encoder writes for it, its usage chunk apart (sent only to a client that asks for it).
 */
export function chatForms(answer: Answer, options: Omit<ChatEncoderOptions, 'includeUsage'>): CacheableAnswer {
  const body = encodeChatAnswer(answer, options);
  const plain: Answer = { ...answer };
  delete plain.wire;
  const encoder = new ChatStreamEncoder({ ...options, includeUsage: true });
  const events = storedEvents(encoder.encode(answerEvents(plain)).frames);
  const usage = plain.usage
    ? storedEvents(encoder.encode([{ type: 'usage', usage: plain.usage }]).frames)[0]?.d
    : undefined;
  return { body, events, ...(usage !== undefined ? { usage } : {}), trailer: sseDone };
}
