/**
 * Long CPU work in slices: call the returned function between steps, and it
 * yields to the event loop once the current slice has run `sliceMs`, so one
 * request's work never holds up every other request (the api and, with
 * `npm start`, the workers share one loop).
 */
export function loopSlices(sliceMs = 2): () => Promise<void> | undefined {
  let sliceStart = performance.now();
  return () => {
    if (performance.now() - sliceStart <= sliceMs) return undefined;
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        sliceStart = performance.now();
        resolve();
      }),
    );
  };
}
