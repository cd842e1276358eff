// Responses waiting on their clients: when one gives its buffers back, when it is closed for
// stalling, and keeping uWS's own timeout from closing it first.

/**
 * How long a response may wait on a client that takes no bytes before it is closed, and what is told
 * of it. Set once at start (configureSlowReaders); the defaults serve tests that never set them.
 */
export interface SlowReaderSettings {
  /** A response whose client accepts no byte for this long is closed. */
  readonly stallMs: number;
  /** Called once per response closed for stalling (a metric). */
  readonly onStall: () => void;
}

let slowReaders: SlowReaderSettings = { stallMs: 60_000, onStall: () => {} };

export function configureSlowReaders(settings: SlowReaderSettings): void {
  slowReaders = settings;
}

/**
 * A response that waits this long on one chunk gives its buffers back and reads the unsent bytes
 * again once the client drains: a reader that stalls holds no buffer while it waits. It gives them
 * back at once when another response waits for memory.
 */
export const RELEASE_AFTER_MS = 1_000;
/**
 * Responses waiting on their client are looked at every SWEEP_MS by one timer, not each by timers
 * of its own: a fast download waits on its client for most of its chunks, and arming and clearing
 * timers for each of them cost a visible share of its CPU.
 */
const SWEEP_MS = 500;
/** uWS's HTTP timeout is 10 s, swept every 4 s, so it fires 8-12 s after it is armed: re-armed every 4 s. */
const REARM_SWEEPS = 8;
interface Waiting {
  /** The sweep the wait began in, and the last one in which the client took a byte. */
  from: number;
  progress: number;
  release(): void;
  stall(): void;
  rearm(): void;
}
const waits = new Set<Waiting>();
let sweeps = 0;
let sweeper: NodeJS.Timeout | null = null;
function sweepWaits(): void {
  sweeps++;
  if (waits.size === 0) {
    clearInterval(sweeper!);
    sweeper = null;
    return;
  }
  const releaseAfter = Math.ceil(RELEASE_AFTER_MS / SWEEP_MS);
  const stallAfter = Math.ceil(slowReaders.stallMs / SWEEP_MS);
  for (const w of waits) {
    if (sweeps - w.progress > stallAfter) {
      slowReaders.onStall();
      w.stall();
      continue;
    }
    if (sweeps - w.from > releaseAfter) w.release();
    if ((sweeps - w.from) % REARM_SWEEPS === 0) w.rearm();
  }
}
/**
 * Watches a response waiting on its client until `end()`: `release` once it has waited
 * RELEASE_AFTER_MS, `rearm` every 4 s, and `stall` (counted) once the client took no byte for the
 * stall timeout; `progressed()` when it took some.
 */
export function watchClient(w: Omit<Waiting, 'from' | 'progress'>): { progressed(): void; end(): void } {
  const entry: Waiting = { ...w, from: sweeps, progress: sweeps };
  waits.add(entry);
  sweeper ??= setInterval(sweepWaits, SWEEP_MS).unref();
  return { progressed: () => void (entry.progress = sweeps), end: () => void waits.delete(entry) };
}
