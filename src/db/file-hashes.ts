import type { Sql } from './sql.ts';
import { ACTIVE_BUNDLE } from './bundle-room.ts';
import { audit, BLOCK_LOCK } from './abuse.ts';

// The SHA-256 of files stored without one (sql/0017_files_unhashed.sql), recorded later against the blocklist.

export interface UnhashedFile {
  id: number;
  storage_key: string;
  size: number;
}

/** Files of live bundles (active or quarantined) with no SHA-256, by id from `afterId` on. */
export const unhashedFiles = (sql: Sql, afterId: number, limit: number): Promise<UnhashedFile[]> =>
  sql<UnhashedFile[]>`
    select f.id, f.storage_key, f.size from files f join bundles b on b.id = f.bundle_id
    where f.sha256 is null and f.id > ${afterId} and ${sql.unsafe(ACTIVE_BUNDLE)}
    order by f.id limit ${limit}`;

/** How many files unhashedFiles would walk, and their bytes. */
export async function countUnhashed(sql: Sql): Promise<{ files: number; bytes: number }> {
  const [r] = await sql<{ files: number; bytes: number }[]>`
    select count(*)::int8 as files, coalesce(sum(f.size), 0)::int8 as bytes from files f join bundles b on b.id = f.bundle_id
    where f.sha256 is null and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  return { files: Number(r?.files ?? 0), bytes: Number(r?.bytes ?? 0) };
}

/**
 * Records a file's SHA-256 (if none is recorded yet) and, when that hash is blocked, quarantines
 * its bundle, audited as done by `operator` (null: whoever blocked the hash). Returns the bundle's
 * code when this quarantined it.
 */
export function recordFileHash(sql: Sql, fileId: number, sha256: Buffer, operator: string | null, note: string): Promise<string | null> {
  return sql.begin(async (t) => {
    const tx = t as unknown as Sql;
    await tx`select pg_advisory_xact_lock_shared(${BLOCK_LOCK})`;
    const [file] = await tx<{ bundle_id: number }[]>`update files set sha256 = ${sha256} where id = ${fileId} and sha256 is null returning bundle_id`;
    if (!file) return null;
    const [held] = await tx<{ short_code: string; created_by: string }[]>`
      update bundles b set quarantined_at = now() from blocked_hashes x
      where b.id = ${file.bundle_id} and b.quarantined_at is null and x.sha256 = ${sha256}
      returning b.short_code, x.created_by`;
    if (!held) return null;
    await audit(tx, 'bundles quarantine', held.short_code, operator ?? held.created_by, `holds blocked ${sha256.toString('hex')}; ${note}`);
    return held.short_code;
  }) as Promise<string | null>;
}
