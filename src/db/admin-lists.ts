// The operator console's lists of keys, blocked hashes and audit records: newest first, one page at a
// time, each page starting after the last row of the one before (keyset paging: an index walk of one
// page, however long the table). A page asks for one row more than it shows, to know if another follows.
import type { Sql } from './sql.ts';
import { page, type Page } from './keyset.ts';
import { KEY_STATE, type ApiKeyRow } from './api-keys.ts';
import type { AuditRow } from './abuse.ts';

export { ID_CURSOR_RE, type Page } from './keyset.ts';

export type KeyListRow = Pick<ApiKeyRow, 'id' | 'prefix' | 'label' | 'plan' | 'state' | 'created_at' | 'last_used_at' | 'expires_at'>;

/** API keys, newest first, below id `before` (a cursor from an earlier page). */
export async function keysPage(sql: Sql, before: string | null, size: number): Promise<Page<KeyListRow>> {
  const rows = await sql<KeyListRow[]>`
    select k.id, k.prefix, k.label, k.plan, k.created_at, k.last_used_at, k.expires_at, ${sql.unsafe(KEY_STATE)}
    from api_keys k where ${before === null ? sql`true` : sql`k.id < ${before}`}
    order by k.id desc limit ${size + 1}`;
  return page(rows, size, (r) => String(r.id));
}

export interface BlockedListRow {
  readonly hex: string;
  readonly reason: string | null;
  readonly created_at: Date;
  readonly created_by: string;
  /** created_at to the microsecond (a Date keeps milliseconds): the page key. */
  readonly at: string;
}

/** A blocklist cursor: `<created_at, ISO to the microsecond, UTC>_<sha256 hex>`. */
export const BLOCKED_CURSOR_RE = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)_([0-9a-f]{64})$/;

/**
 * Blocked hashes, newest first, after a cursor from an earlier page. The cursor's time is sent as
 * text: a timestamptz parameter goes through a JS Date in the driver, which drops the microseconds.
 */
export async function blockedPage(sql: Sql, before: string | null, size: number): Promise<Page<BlockedListRow>> {
  const m = before === null ? null : BLOCKED_CURSOR_RE.exec(before);
  const rows = await sql<BlockedListRow[]>`
    select encode(sha256, 'hex') as hex, reason, created_at, created_by,
           to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at
    from blocked_hashes
    where ${m ? sql`(created_at, sha256) < (${m[1]!}::text::timestamptz, decode(${m[2]!}, 'hex'))` : sql`true`}
    order by created_at desc, sha256 desc limit ${size + 1}`;
  return page(rows, size, (r) => `${r.at}_${r.hex}`);
}

/** Audit records, newest first, below id `before`; only those of `action` and of `operator` when given. */
export async function auditPage(
  sql: Sql, f: { before: string | null; action: string | null; operator: string | null }, size: number,
): Promise<Page<AuditRow>> {
  const rows = await sql<AuditRow[]>`
    select * from audit
    where ${f.before === null ? sql`true` : sql`id < ${f.before}`}
      and ${f.action === null ? sql`true` : sql`action = ${f.action}`}
      and ${f.operator === null ? sql`true` : sql`operator = ${f.operator}`}
    order by id desc limit ${size + 1}`;
  return page(rows, size, (r) => String(r.id));
}
