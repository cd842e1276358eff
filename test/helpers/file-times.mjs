// A node:test reporter that writes one JSON line per top-level test: its file and how long it ran.
// test/run.ts adds the lines up per file and prints the slowest files when a run ends.
export default async function* fileTimes(source) {
  for await (const ev of source) {
    if ((ev.type === 'test:pass' || ev.type === 'test:fail') && ev.data.nesting === 0 && ev.data.file) {
      yield `${JSON.stringify({ file: ev.data.file, ms: ev.data.details?.duration_ms ?? 0, failed: ev.type === 'test:fail' })}\n`;
    }
  }
}
