import type { Sql } from './sql.ts';

/** One request's hold on a resumable upload. */
export interface UploadLock {
  /** The database session holding it, and the lock's key: setProgress records only while they still hold it. */
  readonly pid: number;
  readonly key: string;
  /** Frees it; never rejects (a lost session has freed it already). */
  release(): Promise<void>;
}

export interface UploadLocks {
  /** Takes upload `id`'s lock; null while another request, here or on another node, holds it. */
  take(id: string): Promise<UploadLock | null>;
}

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
  return {
    async take(id) {
      if (held.has(id)) return null;
      held.add(id);
      try {
        const [r] = await session<{ ok: boolean; pid: number; key: string }[]>`
          select pg_try_advisory_lock(k) as ok, pg_backend_pid() as pid, k::text as key
          from (select hashtextextended(${id}, 0) as k) t`;
        if (!r?.ok) {
          held.delete(id);
          return null;
        }
        let released = false;
        return {
          pid: r.pid,
          key: r.key,
          async release() {
            if (released) return;
            released = true;
            // Only in the session that took it: after a reconnect the lock is gone already.
            await session`select pg_advisory_unlock(${r.key}::bigint) from (select 1) t where pg_backend_pid() = ${r.pid}`.catch(() => {});
            held.delete(id);
          },
        };
      } catch (err) {
        held.delete(id);
        throw err;
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
