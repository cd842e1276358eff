import type { Logger } from 'pino';
import type { Sql } from './client.ts';

/**
 * Download counts, written in batches. A completed download adds one in memory; one statement adds
 * each interval's counts. A commit per download held a pooled connection through a WAL flush
 * each, and small downloads queued behind them for the pool (1 KiB downloads: 1.6k req/s with a
 * commit each, 3.2k with none). A failed write puts its counts back for the next one; a crash
 * loses at most one interval; shutdown flushes.
 */
export interface DownloadCounts {
  add(fileId: number): void;
  /** Writes what is pending now (the timer does this every interval). */
  flush(): Promise<void>;
}

export function createDownloadCounts(deps: { sql: Sql; log: Logger; intervalMs?: number }): DownloadCounts {
  const { sql, log } = deps;
  const intervalMs = deps.intervalMs ?? 100;
  const pending = new Map<number, number>();
  let timer: NodeJS.Timeout | null = null;
  let writing: Promise<void> = Promise.resolve();

  const schedule = (): void => {
    if (timer || pending.size === 0) return;
    timer = setTimeout(() => void flush(), intervalMs);
    timer.unref();
  };

  const write = async (ids: number[], counts: number[]): Promise<void> => {
    try {
      await sql`
        update files f set download_count = f.download_count + v.n
        from unnest(${ids}::int8[], ${counts}::int4[]) as v(id, n)
        where f.id = v.id`;
    } catch (err) {
      log.warn({ err, files: ids.length }, 'download counts not recorded yet; retrying');
      for (const [i, id] of ids.entries()) pending.set(id, (pending.get(id) ?? 0) + counts[i]!);
      schedule();
    }
  };

  function flush(): Promise<void> {
    if (timer) clearTimeout(timer);
    timer = null;
    if (pending.size > 0) {
      // In id order, so two processes' batches tend to lock shared rows in the same order (a deadlock
      // PostgreSQL breaks anyway fails one write, which is then retried).
      const ids = [...pending.keys()].sort((a, b) => a - b);
      const counts = ids.map((id) => pending.get(id)!);
      pending.clear();
      // One write at a time, in order.
      writing = writing.then(() => write(ids, counts));
    }
    return writing;
  }

  return {
    add(fileId) {
      pending.set(fileId, (pending.get(fileId) ?? 0) + 1);
      schedule();
    },
    flush,
  };
}
