// cluster-key-slot is pinned to the version ioredis pins (one copy), which ships no types.
declare module 'cluster-key-slot' {
  /** The Cluster hash slot (0–16383) of a key, honouring a `{tag}`. */
  export default function calculateSlot(key: string | Buffer): number;
}
