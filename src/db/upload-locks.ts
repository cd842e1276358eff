import { setTimeout as delay } from 'node:timers/promises';
import type postgres from 'postgres';
import type { PendingQuery, RowList, Sql } from './sql.ts';

/** One request's hold on a resumable upload. */
export interface UploadLock {
  /** The database session holding it, and the lock's key (see stillHeld). */
  readonly pid: number;
  readonly key: string;
  /**
   * Runs `write` on the session holding the lock (guarded with stillHeld, it lands only while that
   * session lives). With `release`, the lock is freed right behind it in the same round trip:
   * whoever takes it next sees what `write` committed.
   */
  write<T extends readonly postgres.MaybeRow[]>(write: (session: Sql) => PendingQuery<T>, release: boolean): Promise<RowList<T>>;
  /**
   * Frees it; never rejects (a lost session has freed it already). A second call does nothing.
   * Whatever releaseWith() left goes right behind the unlock.
   */
  release(): Promise<void>;
  /**
   * A write whose loss costs nothing, to be sent right behind the unlock on the same session once
   * the lock is released, and left to run: its commit does not wait for its flush, and the release
   * resolves without it.
   */
  releaseWith(lossy: (session: Sql) => PendingQuery<readonly postgres.MaybeRow[]>): void;
}

export interface UploadLocks {
  /**
   * Takes upload `id`'s lock (null while another request, here or on another node, holds it), and
   * runs `read` on the lock's session right behind it, in the same round trip: the read sees
   * whatever the previous holder committed before letting go. A lock another process holds is
   * tried again for a moment (RETRY_REFUSED_MS) before it counts as held.
   */
  take<T extends readonly postgres.MaybeRow[]>(id: string, read: (session: Sql) => PendingQuery<T>): Promise<{ lock: UploadLock | null; read: RowList<T> }>;
}

/**
 * Pauses (ms) before a lock the database refused is tried again. A PATCH's holder answers before it
 * sends its unlock (tus/session.ts), so the client's next PATCH, sent to another process or node,
 * may get there first.
 */
const RETRY_REFUSED_MS = [1, 5, 20] as const;

/**
 * Locks that keep writers of one tus upload apart, across processes and nodes: PostgreSQL advisory
 * locks held by one database session of this process's own. They go with that session, so a node
 * that dies (its socket closes; a machine that vanishes is found by TCP keepalives within seconds)
 * frees its uploads at once, while one that only stalls keeps them: no time-based lease can be
 * outlived by a slow writer. Within the process a set keeps two requests apart, since a session
 * may take its own advisory lock twice.
 */
export function createUploadLocks(session: Sql): UploadLocks {
  const held = new Set<string>();
  /** Sent now, so that what is sent next on the session runs after it; settled by the caller. */
  const sendNow = <T extends readonly postgres.MaybeRow[]>(q: PendingQuery<T>): Promise<RowList<T>> => q.execute();

  function holding(id: string, pid: number, key: string): UploadLock {
    let released: Promise<void> | null = null;
    let lossy: ((session: Sql) => PendingQuery<readonly postgres.MaybeRow[]>) | null = null;
    const lock: UploadLock = {
      pid,
      key,
      async write(write, release) {
        const done = sendNow(write(session));
        if (release) void lock.release();
        try {
          return await done;
        } finally {
          await released;
        }
      },
      releaseWith(write) {
        lossy = write;
      },
      release() {
        if (released) return released;
        // Only in the session that took it: after a reconnect the lock is gone already. The set
        // lets go at once: a later take in this process is sent behind this unlock on the session.
        released = sendNow(session`select pg_advisory_unlock(${key}::bigint) from (select 1) t where pg_backend_pid() = ${pid}`).then(
          () => {},
          () => {},
        );
        held.delete(id);
        // Sent in this same turn, so nothing else on the session lands inside its transaction.
        if (lossy) {
          const ignore = (): void => {};
          sendNow(session`begin`).catch(ignore);
          sendNow(session`set local synchronous_commit = off`).catch(ignore);
          sendNow(lossy(session)).catch(ignore);
          sendNow(session`commit`).catch(ignore);
        }
        return released;
      },
    };
    return lock;
  }

  return {
    async take(id, read) {
      if (held.has(id)) return { lock: null, read: await sendNow(read(session)) };
      held.add(id);
      for (let attempt = 0; ; attempt++) {
        const taking = sendNow(session<{ ok: boolean; pid: number; key: string }[]>`
          select pg_try_advisory_lock(k) as ok, pg_backend_pid() as pid, k::text as key
          from (select hashtextextended(${id}, 0) as k) t`);
        const reading = sendNow(read(session));
        const [took, value] = await Promise.allSettled([taking, reading]);
        const r = took.status === 'fulfilled' ? took.value[0] : undefined;
        const lock = r?.ok ? holding(id, r.pid, r.key) : null;
        const failed = took.status === 'rejected' || value.status === 'rejected';
        const last = failed || lock !== null || attempt === RETRY_REFUSED_MS.length;
        if (!lock && last) held.delete(id);
        if (failed) {
          await lock?.release();
          throw took.status === 'rejected' ? took.reason : (value as PromiseRejectedResult).reason;
        }
        if (last) return { lock, read: value.value };
        await delay(RETRY_REFUSED_MS[attempt]);
      }
    },
  };
}

/**
 * SQL condition: advisory lock `key` is still held by session `pid`. An update guarded by it cannot
 * land after the session was lost and another node took the upload.
 */
export const stillHeld = (sql: Sql, lock: Pick<UploadLock, 'pid' | 'key'>) => sql`exists (
  select 1 from pg_locks where locktype = 'advisory' and granted and pid = ${lock.pid} and objsubid = 1
    and classid = ((${lock.key}::bigint >> 32) & 4294967295)::oid and objid = (${lock.key}::bigint & 4294967295)::oid)`;
