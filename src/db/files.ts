// Single files of bundles: the download lookup with its access fields, and deleting one file.
import type { Sql } from './sql.ts';
import type { FileRow } from './rows.ts';
import { ACTIVE_BUNDLE, EXPIRED_BUNDLE, lockForChange, type ChangeCheck } from './bundle-room.ts';
import { refuseQuarantined } from './quarantine.ts';

/** A file of an active bundle, with the bundle fields its access checks need. */
export interface DownloadRow extends FileRow {
  short_code: string;
  access_password_hash: string | null;
  api_key_id: number | null;
  notify_email: string | null;
  is_encrypted: boolean;
  max_downloads: number | null;
}

export async function findDownloadableFile(sql: Sql, fileId: number): Promise<DownloadRow | undefined> {
  const [f] = await sql<DownloadRow[]>`
    select f.*, b.short_code, b.access_password_hash, b.api_key_id, b.notify_email, b.is_encrypted, b.max_downloads, b.quarantined_at
    from files f join bundles b on b.id = f.bundle_id
    where f.id = ${fileId} and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  return refuseQuarantined(f);
}

/** A file with its bundle's upload token hash, the bundle expired or quarantined or not (deleting a file checks all three). */
export async function findFileWithToken(
  sql: Sql,
  fileId: number,
): Promise<{ bundle_id: number; upload_token_hash: Uint8Array; is_expired: boolean; quarantined_at: Date | null } | undefined> {
  const [row] = await sql<Array<{ bundle_id: number; upload_token_hash: Uint8Array; is_expired: boolean; quarantined_at: Date | null }>>`
    select f.bundle_id, b.upload_token_hash, ${sql.unsafe(EXPIRED_BUNDLE)} as is_expired, b.quarantined_at
    from files f join bundles b on b.id = f.bundle_id where f.id = ${fileId}`;
  return row;
}

/**
 * Removes one file of bundle `bundleId` if `check` allows, and adjusts the bundle's totals; returns
 * the storage key, or undefined when there is no such file in it.
 */
export async function deleteFile(sql: Sql, fileId: number, bundleId: number, check: ChangeCheck): Promise<string | undefined> {
  return sql.begin(async (tx) => {
    if (!(await lockForChange(tx as unknown as Sql, bundleId, check))) return undefined;
    const [f] = await tx<{ storage_key: string; size: number; bundle_id: number }[]>`
      delete from files where id = ${fileId} and bundle_id = ${bundleId} returning storage_key, size, bundle_id`;
    if (!f) return undefined;
    await tx`update bundles set total_size_bytes = total_size_bytes - ${f.size}, file_count = file_count - 1
             where id = ${f.bundle_id}`;
    return f.storage_key;
  });
}
