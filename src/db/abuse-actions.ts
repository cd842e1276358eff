import type { Sql } from './sql.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import { audit, blockHash, closeReport, expireBundle, setQuarantine, unblockHash } from './abuse.ts';
import { deleteBundleIn } from './bundles.ts';

/**
 * The operator's abuse actions, each one transaction with its audit rows: an action is recorded if
 * and only if it took effect.
 */

const inTx = <T>(sql: Sql, fn: (tx: Sql) => Promise<T>): Promise<T> => sql.begin((tx) => fn(tx as unknown as Sql)) as Promise<T>;

/** Expires bundle `b` now (a quarantined one is kept until released). */
export function expireAudited(sql: Sql, b: { id: number; short_code: string; quarantined_at: Date | null }, operator: string): Promise<void> {
  return inTx(sql, async (tx) => {
    await expireBundle(tx, b.id);
    await audit(tx, 'bundles expire', b.short_code, operator, b.quarantined_at ? 'quarantined: kept until released' : null);
  });
}

/** Quarantines (`on`) or releases a bundle; false when it already was in that state. */
export function quarantineAudited(sql: Sql, b: { id: number; short_code: string }, on: boolean, operator: string): Promise<boolean> {
  return inTx(sql, async (tx) => {
    const c = await setQuarantine(tx, b.id, on);
    if (c) await audit(tx, `bundles ${on ? 'quarantine' : 'release'}`, b.short_code, operator);
    return c;
  });
}

/** Blocks a SHA-256; bundles already holding it are held at once (evidence kept, nothing served). Their codes. */
export function blockAudited(sql: Sql, sha: Buffer, reason: string | null, operator: string): Promise<string[]> {
  return inTx(sql, async (tx) => {
    const hex = sha.toString('hex');
    const list = await blockHash(tx, sha, reason, operator);
    await audit(tx, 'block add', hex, operator, [reason, list.length ? `quarantined ${list.join(' ')}` : null].filter(Boolean).join('; ') || null);
    for (const c of list) await audit(tx, 'bundles quarantine', c, operator, `holds blocked ${hex}`);
    return list;
  });
}

export function unblockAudited(sql: Sql, sha: Buffer, operator: string): Promise<boolean> {
  return inTx(sql, async (tx) => {
    const removed = await unblockHash(tx, sha);
    if (removed) await audit(tx, 'block remove', sha.toString('hex'), operator);
    return removed;
  });
}

export function closeReportAudited(sql: Sql, id: string, operator: string): Promise<'closed' | 'already' | 'unknown'> {
  return inTx(sql, async (tx) => {
    const res = await closeReport(tx, Number(id));
    if (res === 'closed') await audit(tx, 'reports close', id, operator);
    return res;
  });
}

/** Stored files removed at once by deleteAudited. */
const REMOVE_CONCURRENCY = 16;

/**
 * Deletes bundle `b` with its files, whatever its state (an operator deletes a quarantined bundle on
 * purpose), audited in the same transaction; then its stored bytes through `store`, after the commit
 * (a row never names bytes that are gone). Bytes that could not be removed are orphans the sweeper
 * reclaims: `failed` names them, for the caller to report. Null when the bundle was already gone.
 */
export async function deleteAudited(
  sql: Sql, b: { id: number; short_code: string }, operator: string, store: Pick<BlobStore, 'delete'>,
): Promise<{ files: number; failed: Array<{ key: string; err: unknown }> } | null> {
  const keys = await inTx(sql, async (tx) => {
    const gone = await deleteBundleIn(tx, b.id, () => {});
    if (gone) await audit(tx, 'bundles delete', b.short_code, operator, `${gone.length} file(s)`);
    return gone;
  });
  if (keys === null) return null;
  const failed: Array<{ key: string; err: unknown }> = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < keys.length) {
      const key = keys[next++]!;
      await store.delete(key).catch((err: unknown) => failed.push({ key, err }));
    }
  };
  await Promise.all(Array.from({ length: Math.min(REMOVE_CONCURRENCY, keys.length) }, worker));
  return { files: keys.length, failed };
}
