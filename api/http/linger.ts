import type { Duplex } from 'node:stream';
import type { Socket } from 'node:net';

/** How long a connection the api answered and closed reads and drops what its client still sends, after the answer. */
export const lingerMs = 2_000;

/**
 * Ends a socket after its last answer (`last`, when given, is written first)
 * and destroys it once its client closes its side, or `lingerMs` later,
 * whichever comes first.
 *
 * Closing a connection whose client is still sending makes the kernel answer
 * the next bytes with a reset, which a client still writing takes as a
 * dropped connection (EPIPE) before it reads the answer. So, as nginx's
 * lingering close does: once the answer is out, the write side is closed and
 * what the client still sends is read and dropped (Node's parser dumps it)
 * until it closes its side.
 * But only for so long: the api's sockets are half-open ones (Node's HTTP
 * server allows them), and a client that neither reads nor closes would
 * otherwise hold the socket, and its file descriptor, in FIN-WAIT-2 for as
 * long as it likes.
 */
export function endAndLinger(socket: Duplex, last?: string): void {
  socket.end(last);
  const timer = setTimeout(() => socket.destroy(), lingerMs);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  socket.once('end', () => socket.destroy());
}

/**
 * The same for an answer Node closes itself: Node closes a `connection: close`
 * answer's socket with `destroySoon`, which is replaced here for this one socket.
 */
export function lingerAfterAnswer(socket: Socket): void {
  socket.destroySoon = function lingering(this: Socket): void {
    endAndLinger(this);
  };
}
