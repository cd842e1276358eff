import type { Sql } from './sql.ts';
/** The reasons a report may give (the `reason` column's values). */
export const REASONS = ['malware', 'phishing', 'copyright', 'illegal', 'other'] as const;
export type Reason = (typeof REASONS)[number];

// The tables of abuse handling (sql/0012_abuse.sql): reports, quarantine, blocked hashes, the audit trail.

export interface AuditRow {
  id: number;
  at: Date;
  action: string;
  target: string;
  operator: string;
  detail: string | null;
}

/** Records one operator action; `tx` lets the record commit with the action itself. */
export async function audit(tx: Sql, action: string, target: string, operator: string, detail: string | null = null): Promise<void> {
  await tx`insert into audit (action, target, operator, detail) values (${action}, ${target}, ${operator}, ${detail})`;
}

/** Oldest first, from `since` on (everything when null). */
export const listAudit = (sql: Sql, since: Date | null): Promise<AuditRow[]> =>
  sql<AuditRow[]>`select * from audit where ${since === null ? sql`true` : sql`at >= ${since}`} order by at, id`;

export interface BlockedRow {
  sha256: Uint8Array;
  reason: string | null;
  created_at: Date;
  created_by: string;
}

/** Whether an upload with this SHA-256 (32 bytes) must be refused. */
export async function isBlocked(sql: Sql, sha256: Uint8Array): Promise<boolean> {
  const [row] = await sql`select 1 from blocked_hashes where sha256 = ${Buffer.from(sha256)}`;
  return row !== undefined;
}

export async function anyBlocked(sql: Sql): Promise<boolean> {
  const [r] = await sql<{ any: boolean }[]>`select exists (select 1 from blocked_hashes) as any`;
  return Boolean(r?.any);
}

export const listBlocked = (sql: Sql): Promise<BlockedRow[]> =>
  sql<BlockedRow[]>`select * from blocked_hashes order by created_at, sha256`;

/**
 * Held exclusively while a hash is blocked and shared while a file's hash is recorded later
 * (file-hashes.ts), so neither misses the other: a hash recorded as a block commits is either seen
 * by the block's quarantine or sees the block.
 */
export const BLOCK_LOCK = 7262037;

/** Blocks a hash and quarantines the bundles whose files record it; returns their codes. */
export async function blockHash(tx: Sql, sha256: Buffer, reason: string | null, operator: string): Promise<string[]> {
  await tx`select pg_advisory_xact_lock(${BLOCK_LOCK})`;
  await tx`insert into blocked_hashes (sha256, reason, created_by) values (${sha256}, ${reason}, ${operator})
           on conflict (sha256) do update set reason = coalesce(excluded.reason, blocked_hashes.reason)`;
  const codes = await tx<{ short_code: string }[]>`
    update bundles set quarantined_at = now()
    where quarantined_at is null and id in (select bundle_id from files where sha256 = ${sha256})
    returning short_code`;
  return codes.map((c) => c.short_code).sort();
}

/**
 * The blocked hashes among `sha256s` (hex), asked under BLOCK_LOCK shared by a transaction about to
 * record files with those hashes: a block that commits first is seen here, and one that commits later
 * finds the files and quarantines their bundle. An upload checked before a block committed is thus
 * never written unquarantined.
 */
export async function blockedAmong(tx: Sql, sha256s: string[]): Promise<Set<string>> {
  // Sent together (one round trip); the select still runs after the lock is granted, on a snapshot
  // taken then, since each statement of a READ COMMITTED transaction takes its own.
  const [, rows] = await Promise.all([
    tx`select pg_advisory_xact_lock_shared(${BLOCK_LOCK})`,
    tx<{ hex: string }[]>`
      select encode(sha256, 'hex') as hex from blocked_hashes
      where sha256 in (select decode(h, 'hex') from unnest(${sha256s}::text[]) as h)`,
  ]);
  return new Set(rows.map((r) => r.hex));
}

/** False when the hash was not blocked. */
export async function unblockHash(tx: Sql, sha256: Buffer): Promise<boolean> {
  const rows = await tx`delete from blocked_hashes where sha256 = ${sha256} returning 1`;
  return rows.length > 0;
}

/** The bundle with this code, quarantined or not, expired or not (operator commands and reports). */
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

/** Sets a bundle's expiry to now (a quarantined one stays until released: see ACTIVE_BUNDLE). */
export async function expireBundle(tx: Sql, bundleId: number): Promise<void> {
  await tx`update bundles set expires_at = now() where id = ${bundleId}`;
}

export interface ReportRow {
  id: number;
  short_code: string;
  reason: Reason;
  details: string | null;
  contact: string | null;
  reporter_hash: Uint8Array;
  created_at: Date;
  closed_at: Date | null;
}

export async function insertReport(
  sql: Sql, r: { shortCode: string; reason: Reason; details: string | null; contact: string | null }, reporter: Buffer,
): Promise<number> {
  const [row] = await sql<{ id: number }[]>`
    insert into reports (short_code, reason, details, contact, reporter_hash)
    values (${r.shortCode}, ${r.reason}, ${r.details}, ${r.contact}, ${reporter}) returning id`;
  return Number(row!.id);
}

export const listReports = (sql: Sql, openOnly: boolean): Promise<ReportRow[]> =>
  sql<ReportRow[]>`select * from reports where ${openOnly ? sql`closed_at is null` : sql`true`} order by id`;

/** Closes an open report. */
export async function closeReport(sql: Sql, id: number): Promise<'closed' | 'already' | 'unknown'> {
  const [row] = await sql<{ closed: boolean }[]>`
    update reports set closed_at = coalesce(closed_at, now()) where id = ${id} returning (closed_at <> now()) as closed`;
  if (!row) return 'unknown';
  return row.closed ? 'already' : 'closed';
}

/**
 * Runs `send` with the reports not mailed yet (at most `max`), unless a mail went out within
 * `windowMs` of `now`, and marks them mailed with it, in one transaction. Processes take turns (an
 * advisory lock): two never mail the same reports.
 */
export function mailUnmailedReports(
  sql: Sql, now: Date, windowMs: number, max: number, send: (rows: ReportRow[], tx: Sql) => Promise<void>,
): Promise<number> {
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(7262036)`;
    const [last] = await tx<{ at: Date | null }[]>`select max(mailed_at) as at from reports`;
    if (last?.at && now.getTime() - last.at.getTime() < windowMs) return 0;
    const rows = await tx<ReportRow[]>`select * from reports where mailed_at is null order by id limit ${max}`;
    if (rows.length === 0) return 0;
    await send(rows, tx as unknown as Sql);
    await tx`update reports set mailed_at = ${now} where id = any(${rows.map((r) => r.id)})`;
    return rows.length;
  });
}
