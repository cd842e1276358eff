// A node:test reporter that writes one JSON line per top-level test (its file and how long it ran)
// and one per failed test at any depth (its name and the first lines of its error). test/run.ts adds
// the times up per file and lists the failures again at the end, where a long log's tail shows them.
export default async function* fileTimes(source) {
  for await (const ev of source) {
    if ((ev.type === 'test:pass' || ev.type === 'test:fail') && ev.data.nesting === 0 && ev.data.file) {
      yield `${JSON.stringify({ file: ev.data.file, ms: ev.data.details?.duration_ms ?? 0, failed: ev.type === 'test:fail' })}\n`;
    }
    if (ev.type === 'test:fail' && ev.data.file) {
      const err = ev.data.details?.error;
      const cause = err?.cause ?? err;
      const message = String(cause?.message ?? cause ?? '').split('\n').slice(0, 6).join('\n');
      yield `${JSON.stringify({ fail: ev.data.name, file: ev.data.file, nesting: ev.data.nesting, message })}\n`;
    }
  }
}
