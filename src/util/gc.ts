import v8 from 'node:v8';
import vm from 'node:vm';

type Gc = (o: { type: 'minor' | 'major'; execution?: 'async' }) => void;
let gc: Gc | null | undefined;

/** V8's own collector (what --expose-gc exposes), taken without exposing it globally; null where it cannot be had. */
function collector(): Gc | null {
  if (gc !== undefined) return gc;
  try {
    v8.setFlagsFromString('--expose-gc');
    gc = vm.runInNewContext('gc') as Gc;
  } catch {
    gc = null;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
  return typeof gc === 'function' ? gc : (gc = null);
}

/**
 * Counts bytes that went through buffers the runtime allocated and dropped (an HTTP client's socket
 * reads, copied out at once), and runs a minor collection after every `everyBytes` of them. V8 frees
 * such buffers only when its young generation fills with objects or external memory has grown by
 * tens of MiB; a stream that allocates little else would hold that much garbage in RSS, and the
 * allocator would keep touching fresh pages instead of the ones just freed. A minor collection of a
 * small young generation takes well under a millisecond.
 */
export function createGarbageMeter(everyBytes: number): (bytes: number) => void {
  let since = 0;
  return (bytes) => {
    since += bytes;
    if (since < everyBytes) return;
    since = 0;
    collector()?.({ type: 'minor' });
  };
}

/**
 * Starts an incremental full collection, at most once per `minIntervalMs` (a call within it is
 * served at its end): large buffers a pool has just let go of live in the old generation, which
 * only a full collection frees, and nothing else may start one for a long while.
 */
export function createOldCollector(minIntervalMs: number): () => void {
  let last = 0;
  let timer: NodeJS.Timeout | null = null;
  const run = () => {
    timer = null;
    last = Date.now();
    collector()?.({ type: 'major', execution: 'async' });
  };
  return () => {
    if (timer) return;
    const wait = last + minIntervalMs - Date.now();
    if (wait <= 0) run();
    else timer = setTimeout(run, wait).unref();
  };
}

/**
 * Has V8 collect its old generation once it has grown by `percent` since the last full collection,
 * instead of letting it grow to several times what is live, as it does on a machine with gigabytes of
 * memory. A --heap-growing-percent given to node on its command line is kept.
 */
export function boundHeapGrowth(percent: number): void {
  if (process.execArgv.some((a) => a.startsWith('--heap-growing-percent'))) return;
  v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}
