// The files `sluice storage migrate` copies into a bucket, and its record of the verified copies.
import type { Sql } from './sql.ts';
import { ACTIVE_BUNDLE, EXPIRED_BUNDLE } from './bundle-room.ts';

/** A file row to copy: its key, what its row says of its bytes, and its bundle's code (for the operator). */
export interface CopyCandidate {
  id: number;
  storage_key: string;
  size: number;
  /** Null for files uploaded by a release that no longer computes it (sql/0007). */
  sha256: Uint8Array | null;
  crc32: number;
  short_code: string;
}

/**
 * Up to `limit` files of live bundles (quarantined ones included: their files are kept) with no
 * verified copy at `target`, after file id `afterId`, in id order: a run walks the table once, and
 * rows committed meanwhile come after the ones it has seen.
 */
export function filesToCopy(sql: Sql, target: string, afterId: number, limit: number): Promise<CopyCandidate[]> {
  return sql<CopyCandidate[]>`
    select f.id, f.storage_key, f.size, f.sha256, f.crc32, b.short_code
    from files f join bundles b on b.id = f.bundle_id
    where f.id > ${afterId} and ${sql.unsafe(ACTIVE_BUNDLE)}
      and not exists (select 1 from storage_copies c where c.target = ${target} and c.storage_key = f.storage_key)
    order by f.id limit ${limit}`;
}

/** Files of live bundles already copied to `target`, and files of expired bundles the sweeper has not removed yet. */
export async function copyCounts(sql: Sql, target: string): Promise<{ verified: number; expired: number }> {
  const [r] = await sql<Array<{ verified: number; expired: number }>>`
    select count(*) filter (where ${sql.unsafe(ACTIVE_BUNDLE)} and exists (
             select 1 from storage_copies c where c.target = ${target} and c.storage_key = f.storage_key))::int as verified,
           count(*) filter (where ${sql.unsafe(EXPIRED_BUNDLE)})::int as expired
    from files f join bundles b on b.id = f.bundle_id`;
  return r!;
}

/** Whether a file row still names `key` (a file deleted, or a bundle swept, during the copy: not an error). */
export async function fileExists(sql: Sql, key: string): Promise<boolean> {
  const [r] = await sql`select 1 from files where storage_key = ${key}`;
  return r !== undefined;
}

export async function recordCopy(sql: Sql, target: string, key: string, size: number, sha256: Buffer): Promise<void> {
  await sql`
    insert into storage_copies (target, storage_key, size, sha256) values (${target}, ${key}, ${size}, ${sha256})
    on conflict (target, storage_key) do update set size = excluded.size, sha256 = excluded.sha256, verified_at = now()`;
}
