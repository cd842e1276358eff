import type { Sql } from './sql.ts';
import { audit, blockHash, closeReport, expireBundle, setQuarantine, unblockHash } from './abuse.ts';

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
