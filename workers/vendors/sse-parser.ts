/**
 * Incremental Server-Sent Events parser shared by every vendor.
 *
 * Bytes arrive in arbitrary pieces: a UTF-8 character, a `\r\n` pair or a
 * JSON payload may be cut anywhere, so nothing is interpreted line by line
 * until its terminator has arrived.
 */

export interface SseEvent {
  /** The `event:` field, when the event had one. */
  event?: string;
  /** The `data:` lines of the event joined with `\n`. */
  data: string;
  /** The `id:` field, when the event had one. */
  id?: string;
}

const LF = 10;

export class SseParser {
  // fatal:false keeps a vendor's stray invalid byte from killing the stream (it becomes U+FFFD).
  private readonly decoder = new TextDecoder('utf-8');
  /** Text after the last line terminator: a line still being received. */
  private pending = '';
  /** The previous piece ended in `\r`; a `\n` opening the next one belongs to it. */
  private skipLeadingLineFeed = false;
  private data = '';
  private hasData = false;
  private eventName: string | undefined;
  private eventId: string | undefined;

  /** Feeds one network read; returns the events it completed (often none). */
  push(chunk: Uint8Array): SseEvent[] {
    const events: SseEvent[] = [];
    this.consume(this.decoder.decode(chunk, { stream: true }), events);
    return events;
  }

  /** Ends the stream: a last event without a trailing blank line is still delivered. */
  end(): SseEvent[] {
    const events: SseEvent[] = [];
    this.consume(this.decoder.decode(), events);
    if (this.pending.length > 0) {
      this.processLine(this.pending, events);
      this.pending = '';
    }
    this.dispatch(events);
    this.skipLeadingLineFeed = false;
    return events;
  }

  private consume(text: string, events: SseEvent[]): void {
    if (text.length === 0) return;
    if (this.skipLeadingLineFeed) {
      this.skipLeadingLineFeed = false;
      if (text.charCodeAt(0) === LF) {
        text = text.slice(1);
        if (text.length === 0) return;
      }
    }
    // The pending part is known to hold no terminator, so the search starts after it.
    const searchFrom = this.pending.length;
    const buffer = searchFrom > 0 ? this.pending + text : text;
    const length = buffer.length;
    let lineStart = 0;
    let nextLineFeed = buffer.indexOf('\n', searchFrom);
    let nextCarriageReturn = buffer.indexOf('\r', searchFrom);

    while (nextLineFeed !== -1 || nextCarriageReturn !== -1) {
      let lineEnd: number;
      let nextLineStart: number;
      if (nextCarriageReturn === -1 || (nextLineFeed !== -1 && nextLineFeed < nextCarriageReturn)) {
        lineEnd = nextLineFeed;
        nextLineStart = lineEnd + 1;
      } else {
        lineEnd = nextCarriageReturn;
        if (lineEnd + 1 === length) {
          this.skipLeadingLineFeed = true;
          nextLineStart = length;
        } else {
          nextLineStart = buffer.charCodeAt(lineEnd + 1) === LF ? lineEnd + 2 : lineEnd + 1;
        }
      }
      this.processLine(buffer.slice(lineStart, lineEnd), events);
      lineStart = nextLineStart;
      if (nextLineFeed !== -1 && nextLineFeed < lineStart) nextLineFeed = buffer.indexOf('\n', lineStart);
      if (nextCarriageReturn !== -1 && nextCarriageReturn < lineStart) {
        nextCarriageReturn = buffer.indexOf('\r', lineStart);
      }
    }
    this.pending = lineStart === 0 ? buffer : buffer.slice(lineStart);
  }

  private processLine(line: string, events: SseEvent[]): void {
    if (line.length === 0) {
      this.dispatch(events);
      return;
    }
    const first = line.charCodeAt(0);
    if (first === 58 /* ':' */) return;

    const colon = line.indexOf(':');
    let field: string;
    let value: string;
    if (colon === -1) {
      field = line;
      value = '';
    } else {
      field = line.slice(0, colon);
      const valueStart = line.charCodeAt(colon + 1) === 32 /* ' ' */ ? colon + 2 : colon + 1;
      value = line.slice(valueStart);
    }

    switch (field) {
      case 'data':
        this.data = this.hasData ? `${this.data}\n${value}` : value;
        this.hasData = true;
        break;
      case 'event':
        this.eventName = value;
        break;
      case 'id':
        // The spec ignores ids containing NUL, so a corrupt id never replaces a good one.
        if (!value.includes('\0')) this.eventId = value;
        break;
      default:
        // `retry:` and unknown fields carry nothing a vendor client needs.
        break;
    }
  }

  private dispatch(events: SseEvent[]): void {
    if (this.hasData) {
      const event: SseEvent = { data: this.data };
      if (this.eventName !== undefined) event.event = this.eventName;
      if (this.eventId !== undefined) event.id = this.eventId;
      events.push(event);
    }
    this.data = '';
    this.hasData = false;
    this.eventName = undefined;
    // `id` is deliberately not carried over: vendors never rely on the sticky last-event-id.
    this.eventId = undefined;
  }
}
