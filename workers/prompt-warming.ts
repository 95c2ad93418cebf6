import type { Redis } from 'ioredis';
import { promptWarmKey } from '../shared/redis-keys.js';
import { as, luaFiles, redisScript } from '../shared/redis-script.js';

/** Marks the prefix pending (the caller writes it), refreshes a written one, or says the writer's mark. */
const warmScript = redisScript({
  name: 'prompt_warm',
  files: luaFiles(import.meta.url, 'prompt-warm'),
  keys: ['mark'],
  args: ['pending', 'waitMs', 'lifetimeMs'],
  reply: as<string>(),
});

/** Removes the writer's pending mark, only its own. */
const unwarmScript = redisScript({
  name: 'prompt_unwarm',
  files: luaFiles(import.meta.url, 'prompt-unwarm'),
  keys: ['mark'],
  args: ['pending'],
  reply: as<number>(),
});

/** How often a waiting request looks whether the writer has started answering. */
const pollMs = 20;

/** The request that writes a prefix: it says when the vendor has (its first output), or that it failed. */
export interface PrefixWriter {
  written(): void;
  failed(): void;
}

/**
 * Warming a channel's prompt cache (docs/scaling.md, Prompt-cache affinity). Requests that share a prefix the vendor
 * has not cached on their channel would each write it (each billed the cache write, none reading it): the first goes
 * to the vendor, the others wait until it starts answering (the vendor has written the prefix by then) and go on to
 * read it, or until `waitMs` passed, never longer. A priority request does not wait. A prefix sent is taken as cached
 * on its channel for `lifetimeMs` after its last use.
 */
export class PromptWarming {
  constructor(
    private readonly redis: Redis,
    private readonly options: { waitMs: number; lifetimeMs: number },
  ) {}

  /**
   * Before the call on `channel` of a prompt with the affinity key `key`: resolves to the writer's handle when this
   * request writes the prefix, else once the prefix is written (or the wait is over, or the request is cancelled).
   */
  async before(
    channel: string,
    key: string,
    jobId: string,
    signal: AbortSignal,
    priority: boolean,
  ): Promise<PrefixWriter | undefined> {
    const { waitMs, lifetimeMs } = this.options;
    if (waitMs <= 0) return undefined;
    const mark = promptWarmKey(channel, key);
    const pending = `p:${jobId}`;
    const found = await warmScript(this.redis, { mark, pending, waitMs, lifetimeMs });
    if (found === '') {
      let done = false;
      return {
        written: () => {
          if (done) return;
          done = true;
          void this.redis.set(mark, 'w', 'PX', lifetimeMs).catch(() => undefined);
        },
        failed: () => {
          if (done) return;
          done = true;
          // Only its own mark: the next request writes the prefix.
          void unwarmScript(this.redis, { mark, pending }).catch(() => undefined);
        },
      };
    }
    // Its own mark (a run of the job again) or a written prefix: nothing to wait for.
    if (found === 'w' || found === pending || priority) return undefined;
    const until = Date.now() + waitMs;
    while (Date.now() < until && !signal.aborted) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(pollMs, Math.max(1, until - Date.now()))));
      const now = await this.redis.get(mark);
      if (now === null || now === 'w') break;
    }
    return undefined;
  }
}
