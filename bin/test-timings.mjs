// A reporter of `node --test` beside the one people read (bin/test.mjs adds it): the time of each test file, its
// top-level tests' durations summed (a file's describe holds its set-up), and how many tests passed and failed
// (suites not counted, as the spec reporter counts), written as one JSON object `{ files: { "<file>": ms }, passed,
// failed }` to its destination once the run ends. bin/test.mjs keeps the times to start the slowest files first next
// time, prints the ten slowest, and closes on the counts of both rounds.
export default async function* testTimings(source) {
  const files = {};
  let passed = 0;
  let failed = 0;
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { file, nesting, details } = event.data;
    if (details?.type !== 'suite') {
      if (event.type === 'test:pass') passed++;
      else failed++;
    }
    if (nesting === 0 && typeof file === 'string') files[file] = (files[file] ?? 0) + (details?.duration_ms ?? 0);
  }
  yield `${JSON.stringify({ files, passed, failed })}\n`;
}
