import type { Logger } from 'pino';
import type { Sql } from './sql.ts';
import { filesJson, queueEventsSql } from './webhooks.ts';

/**
 * Counters written in batches: files' download_count and bundles' view_count. A completed download
 * or a share-page view adds one in memory; one statement adds each interval's counts. A commit per
 * event held a pooled connection through a WAL flush each (and, embedded, the event loop through
 * the query): small downloads queued behind them for the pool (1 KiB downloads: 1.6k req/s with a
 * commit each, 3.2k with none). A failed write puts its counts back for the next one; a crash
 * loses at most one interval; shutdown flushes.
 */
export interface BatchedCounts {
  add(id: number): void;
  /** Writes what is pending now (the timer does this every interval). */
  flush(): Promise<void>;
}

/** download_count of files, by file id. */
export type DownloadCounts = BatchedCounts;

type CountWriter = (sql: Sql, ids: number[], counts: number[]) => Promise<unknown>;

/** The one statement per counter: each row gains its interval's count. */
const WRITERS = {
  // Each download counted is a file.downloaded event, written by the same statement.
  downloads: (sql, ids, counts) => sql`
    with v as (select * from unnest(${ids}::int8[], ${counts}::int4[]) as v(id, n)),
    u as (
      update files f set download_count = f.download_count + v.n from v where f.id = v.id
      returning f.id, f.bundle_id, f.name, f.size, f.seq
    ), e as (
      ${sql.unsafe(queueEventsSql('file.downloaded', `select b.api_key_id, b.short_code, ${filesJson('u f where f.id = u1.id')} as files
        from u u1 join v on v.id = u1.id cross join generate_series(1, v.n) join bundles b on b.id = u1.bundle_id
        where b.api_key_id is not null`))}
    )
    select count(*) from u`,
  // view_count is not among the columns whose change is announced (sql/0006): no cache is dropped.
  views: (sql, ids, counts) => sql`
    update bundles b set view_count = b.view_count + v.n
    from unnest(${ids}::int8[], ${counts}::int4[]) as v(id, n)
    where b.id = v.id`,
} satisfies Record<string, CountWriter>;

export function createDownloadCounts(deps: { sql: Sql; log: Logger; intervalMs?: number }): DownloadCounts {
  return createBatchedCounts({ ...deps, counter: 'downloads' });
}

/** view_count of bundles, by bundle id. */
export function createViewCounts(deps: { sql: Sql; log: Logger; intervalMs?: number }): BatchedCounts {
  return createBatchedCounts({ ...deps, counter: 'views' });
}

function createBatchedCounts(deps: {
  sql: Sql;
  log: Logger;
  intervalMs?: number;
  counter: keyof typeof WRITERS;
}): BatchedCounts {
  const { sql, log, counter } = deps;
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
      await WRITERS[counter](sql, ids, counts);
    } catch (err) {
      log.warn({ err, counter, rows: ids.length }, 'counts not recorded yet; retrying');
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
    add(id) {
      pending.set(id, (pending.get(id) ?? 0) + 1);
      schedule();
    },
    flush,
  };
}
