// The operator console's reports (/admin/reports): the queue, open reports first, oldest first (the
// order they wait in), then closed ones, most recently closed first; each page starts after the last
// row of the one before (keyset paging through reports_open and reports_closed, sql/0025), so a page
// costs the same with 10^5 reports as with ten.
import type { Sql } from './sql.ts';
import type { Reason } from './abuse.ts';
import { EXPIRED_BUNDLE } from './bundle-room.ts';

/** What became of a report's bundle: null when there is no bundle of that code any more. */
export type BundleState = 'active' | 'expired' | 'quarantined' | null;

export interface ReportListRow {
  readonly id: number;
  readonly short_code: string;
  readonly reason: Reason;
  readonly details: string | null;
  readonly contact: string | null;
  readonly created_at: Date;
  readonly closed_at: Date | null;
  readonly bundle: BundleState;
  /** The page key's time (created_at while open, closed_at once closed), to the microsecond, UTC. */
  readonly at: string;
}

export interface ReportPage {
  readonly rows: ReportListRow[];
  /** Where the next page starts; null on the last page. */
  readonly next: string | null;
}

/** A queue cursor: `o_<created_at>_<id>` among the open reports, `c_<closed_at>_<id>` among the closed. */
export const REPORT_CURSOR_RE = /^([oc])_(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)_([1-9]\d{0,15})$/;

// A page key's time goes back as text (`::text::timestamptz`): a parameter typed timestamptz is sent
// through a Date, which keeps milliseconds, and rows between two microseconds would be shown twice or skipped.
const AT = (col: string): string => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** The state of the bundle named `r.short_code`, as one value. */
const BUNDLE_STATE = `(select case when b.quarantined_at is not null then 'quarantined' when ${EXPIRED_BUNDLE} then 'expired' else 'active' end
  from bundles b where b.short_code = r.short_code)`;

const LIST_COLS = `r.id, r.short_code, r.reason, r.details, r.contact, r.created_at, r.closed_at, ${BUNDLE_STATE} as bundle`;

/** The queue from `after` (a cursor of an earlier page; null or malformed: the first page). */
export async function reportQueue(sql: Sql, after: string | null, size: number): Promise<ReportPage> {
  const m = after === null ? null : REPORT_CURSOR_RE.exec(after);
  const from = m ? { at: m[2]!, id: m[3]! } : null;
  const rows: ReportListRow[] = [];
  if (m === null || m[1] === 'o') {
    rows.push(...(await sql<ReportListRow[]>`
      select ${sql.unsafe(LIST_COLS)}, ${sql.unsafe(AT('r.created_at'))} as at from reports r
      where r.closed_at is null and ${from ? sql`(r.created_at, r.id) > (${from.at}::text::timestamptz, ${from.id}::int8)` : sql`true`}
      order by r.created_at, r.id limit ${size + 1}`));
  }
  if (rows.length <= size) {
    const closedFrom = m?.[1] === 'c' ? from : null;
    rows.push(...(await sql<ReportListRow[]>`
      select ${sql.unsafe(LIST_COLS)}, ${sql.unsafe(AT('r.closed_at'))} as at from reports r
      where r.closed_at is not null and ${closedFrom ? sql`(r.closed_at, r.id) < (${closedFrom.at}::text::timestamptz, ${closedFrom.id}::int8)` : sql`true`}
      order by r.closed_at desc, r.id desc limit ${size + 1 - rows.length}`));
  }
  const shown = rows.slice(0, size);
  const last = shown[shown.length - 1];
  return { rows: shown, next: rows.length > size && last ? `${last.closed_at ? 'c' : 'o'}_${last.at}_${last.id}` : null };
}

export interface ReportDetail extends Omit<ReportListRow, 'at' | 'bundle'> {
  /** The first 8 hex digits of the reporter's keyed hash: tells repeat reporters apart (as the CLI prints it). */
  readonly reporter: string;
}

export async function reportById(sql: Sql, id: number): Promise<ReportDetail | undefined> {
  const [r] = await sql<ReportDetail[]>`
    select id, short_code, reason, details, contact, created_at, closed_at, encode(substring(reporter_hash from 1 for 4), 'hex') as reporter
    from reports where id = ${id}`;
  return r;
}

export interface OtherReport {
  readonly id: number;
  readonly reason: Reason;
  readonly created_at: Date;
  readonly closed_at: Date | null;
}

/** How many reports name bundle `code` besides report `except` (0: none), and the newest `limit` of them. */
export async function reportsOfCode(sql: Sql, code: string, except: number, limit: number): Promise<{ total: number; rows: OtherReport[] }> {
  const [rows, [count]] = await Promise.all([
    sql<OtherReport[]>`
      select id, reason, created_at, closed_at from reports
      where short_code = ${code} and id <> ${except} order by id desc limit ${limit}`,
    sql<{ n: number }[]>`select count(*)::int as n from reports where short_code = ${code} and id <> ${except}`,
  ]);
  return { total: count?.n ?? 0, rows };
}
