import { crc32 } from '../../util/crc32.mjs';
import type { BlobAppender, BlobDigest } from '../blob-store.ts';

// CRC-32s of resumables taken as their bytes pass through this process, so that completing one
// does not read the whole object back from the bucket (minutes for tens of GiB, while its client
// waits). Like the disk store's, it is the CRC-32 alone: a SHA-256 is taken where one is asked for
// (abuse/inspector.ts). A run counts only once the append that made it has its end on record
// (BlobStore.recorded): until then another node may append those very offsets again, with other
// bytes. Appends elsewhere, a restart or a cut inside an append leave no run, and completion reads
// the object back.

/** Runs kept at once; the oldest goes first (an abandoned upload's), costing only a read-back. */
const MAX_RUNS = 4096;

interface Run {
  readonly crc: number;
  /** The bytes it covers: [0, at). */
  readonly at: number;
  /** `at` is the offset on record. */
  readonly confirmed: boolean;
}

export interface DigestsAhead {
  /**
   * Wraps an append at `appender.offset` so its bytes feed resumable `id`'s CRC, when a confirmed run
   * ends there (or the append starts at 0). The run is kept if finish() made every byte fed durable.
   */
  feed(id: string, appender: BlobAppender): BlobAppender;
  /** The caller's own append to `id` ended at `offset`, now on record: that run counts. */
  confirm(id: string, offset: number): void;
  /** The digest of resumable `id`'s first `size` bytes, if this process saw exactly them; forgotten either way. */
  take(id: string, size: number): BlobDigest | null;
  forget(id: string): void;
}

export function createDigestsAhead(): DigestsAhead {
  const runs = new Map<string, Run>();
  const keep = (id: string, run: Run): void => {
    runs.set(id, run);
    if (runs.size > MAX_RUNS) runs.delete(runs.keys().next().value!);
  };

  return {
    feed(id, appender) {
      const start = appender.offset;
      const found = runs.get(id);
      runs.delete(id);
      // Kept as it was for an append that ends where it began (aborted, cut back, failed).
      const before: Run | null = found?.confirmed && found.at === start ? found : start === 0 ? { crc: 0, at: 0, confirmed: true } : null;
      if (!before) return appender;
      let crc = before.crc;
      let fed = 0;
      let settled = false;
      return {
        offset: start,
        write(chunk, transient) {
          crc = crc32(chunk, crc);
          fed += chunk.length;
          return appender.write(chunk, transient);
        },
        onDrain: (fn) => appender.onDrain(fn),
        async finish(opts) {
          const r = await appender.finish(opts);
          settled = true;
          // Any other end (a chunk refused at the limit) would leave a CRC of bytes the object lacks.
          if (r.offset === start + fed) keep(id, { crc, at: r.offset, confirmed: fed === 0 });
          else if (r.offset === start) keep(id, before);
          return r;
        },
        abort() {
          appender.abort();
          if (!settled) keep(id, before);
          settled = true;
        },
      };
    },
    confirm(id, offset) {
      const run = runs.get(id);
      if (run?.at === offset && !run.confirmed) runs.set(id, { ...run, confirmed: true });
    },
    take(id, size) {
      const run = runs.get(id);
      runs.delete(id);
      return run?.confirmed && run.at === size ? { size, crc32: run.crc >>> 0, sha256: null } : null;
    },
    forget(id) {
      runs.delete(id);
    },
  };
}
