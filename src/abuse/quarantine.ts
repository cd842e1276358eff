import type { Sql } from '../db/client.ts';
import { AppError } from '../errors.ts';

/**
 * The one quarantine rule, applied where a bundle is looked up by code, token or file id (db/bundles.ts,
 * tus/store.ts): a quarantined bundle answers 451 on every path, before any other check, so nothing
 * of it (files, names, previews, its manage page) is served or changed. Its rows and files stay.
 */
export function refuseQuarantined<T extends object>(row: T | undefined): T | undefined {
  if (row !== undefined && (row as { quarantined_at?: Date | null }).quarantined_at != null) throw new AppError('UNAVAILABLE_FOR_LEGAL_REASONS');
  return row;
}

/** The bundle with this code, quarantined or not, expired or not (operator commands only). */
export async function bundleByCode(sql: Sql, code: string): Promise<{ id: number; short_code: string; quarantined_at: Date | null } | undefined> {
  const [b] = await sql<{ id: number; short_code: string; quarantined_at: Date | null }[]>`
    select id, short_code, quarantined_at from bundles where short_code = ${code}`;
  return b;
}

/** Quarantines (true) or releases (false) a bundle; false when it already was in that state. */
export async function setQuarantine(sql: Sql, bundleId: number, on: boolean): Promise<boolean> {
  const rows = on
    ? await sql`update bundles set quarantined_at = now() where id = ${bundleId} and quarantined_at is null returning id`
    : await sql`update bundles set quarantined_at = null where id = ${bundleId} and quarantined_at is not null returning id`;
  return rows.length > 0;
}
