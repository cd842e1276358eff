import type { Sql } from './sql.ts';
import type { BundleRow, FileRow } from './rows.ts';
import { ACTIVE_BUNDLE } from './bundle-room.ts';
import { refuseQuarantined } from './quarantine.ts';

/** What `GET /api/v1/my/usage` totals over a key's active bundles. */
export interface KeyTotals {
  bundle_count: number;
  total_bytes: number;
  total_files: number;
}

/** A key's active bundles (quarantined ones included), newest first (at most 100), each with its files in id order. */
export async function listKeyBundles(sql: Sql, keyId: number): Promise<Array<BundleRow & { files: FileRow[] }>> {
  const bundles = await sql<BundleRow[]>`
    select b.*, false as is_expired from bundles b
    where b.api_key_id = ${keyId} and ${sql.unsafe(ACTIVE_BUNDLE)}
    order by b.created_at desc, b.id desc limit 100`;
  const ids = bundles.map((b) => b.id);
  const files = ids.length ? await sql<FileRow[]>`select * from files where bundle_id = any(${ids}) order by seq` : [];
  const byBundle = new Map<number, FileRow[]>();
  for (const f of files) {
    const list = byBundle.get(f.bundle_id);
    if (list) list.push(f);
    else byBundle.set(f.bundle_id, [f]);
  }
  return bundles.map((b) => ({ ...b, files: byBundle.get(b.id) ?? [] }));
}

export async function keyTotals(sql: Sql, keyId: number): Promise<KeyTotals> {
  const [totals] = await sql<KeyTotals[]>`
    select count(*)::int8 as bundle_count, coalesce(sum(b.total_size_bytes), 0)::int8 as total_bytes,
           coalesce(sum(b.file_count), 0)::int8 as total_files
    from bundles b where b.api_key_id = ${keyId} and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  return totals!;
}

/**
 * The id of bundle `code` when key `keyId` owns it, expired or not (its owner may still delete it);
 * a quarantined one answers 451 (its files are evidence).
 */
export async function findOwnedBundleId(sql: Sql, code: string, keyId: number): Promise<number | undefined> {
  const [b] = await sql<{ id: number; quarantined_at: Date | null }[]>`
    select id, quarantined_at from bundles where short_code = ${code} and api_key_id = ${keyId}`;
  return refuseQuarantined(b)?.id;
}
