// The operator console's bundles (/admin/bundles, and a report's bundle): found by code, vanity name,
// owner key prefix or a file's SHA-256, whatever their state (expired and quarantined ones too), a
// page at a time from where the last page stopped (keyset paging: an index range per page with 10^6
// bundles; sql/0025 has the indexes).
import type { Sql } from './sql.ts';
import { ID_CURSOR_RE, page } from './keyset.ts';
import { EXPIRED_BUNDLE } from './bundle-room.ts';

/** What the console searches by; `any` is a 5-character term, both a code and a vanity name. */
export type BundleQuery =
  | { readonly by: 'all' }
  | { readonly by: 'code' | 'vanity' | 'any'; readonly value: string }
  | { readonly by: 'key'; readonly prefix: string }
  | { readonly by: 'sha256'; readonly hex: string };

export interface BundleListRow {
  readonly id: number;
  readonly short_code: string;
  readonly vanity: string | null;
  readonly created_at: Date;
  readonly expires_at: Date | null;
  readonly quarantined_at: Date | null;
  readonly is_expired: boolean;
  readonly total_size_bytes: number;
  readonly file_count: number;
  /** The owner key's prefix; null for an anonymous bundle. */
  readonly key_prefix: string | null;
  /** created_at to the microsecond, UTC (a Date keeps milliseconds): the page key of a key's bundles. */
  readonly at: string;
}

export interface BundlePage {
  readonly rows: BundleListRow[];
  readonly next: string | null;
}

const LIST_COLS = `b.id, b.short_code, b.vanity, b.created_at, b.expires_at, b.quarantined_at, ${EXPIRED_BUNDLE} as is_expired,
  b.total_size_bytes, b.file_count, k.prefix as key_prefix,
  to_char(b.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at`;

/**
 * A key's bundles page by (created_at, id), through bundles_api_key. The time goes back as text
 * (`::text::timestamptz`): a timestamptz parameter passes through a Date, which keeps milliseconds only.
 */
const KEY_CURSOR_RE = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)_([1-9]\d{0,15})$/;

/**
 * One page of the bundles `q` finds, newest first, after `after` (a cursor of an earlier page; null
 * or malformed: the first page). Every bundle: ordered by id (the primary key; ids grow with time).
 */
export async function searchBundles(sql: Sql, q: BundleQuery, after: string | null, size: number): Promise<BundlePage> {
  const cols = sql.unsafe(LIST_COLS);
  const from = sql.unsafe('bundles b left join api_keys k on k.id = b.api_key_id');
  const beforeId = after !== null && ID_CURSOR_RE.test(after) ? after : null;
  let rows: BundleListRow[];
  if (q.by === 'all') {
    rows = await sql<BundleListRow[]>`select ${cols} from ${from}
      where ${beforeId ? sql`b.id < ${beforeId}::int8` : sql`true`} order by b.id desc limit ${size + 1}`;
  } else if (q.by === 'key') {
    const m = after === null ? null : KEY_CURSOR_RE.exec(after);
    rows = await sql<BundleListRow[]>`select ${cols} from ${from}
      where b.api_key_id = (select id from api_keys where prefix = ${q.prefix})
        and ${m ? sql`(b.created_at, b.id) < (${m[1]!}::text::timestamptz, ${m[2]!}::int8)` : sql`true`}
      order by b.created_at desc, b.id desc limit ${size + 1}`;
    return page(rows, size, (r) => `${r.at}_${r.id}`);
  } else if (q.by === 'sha256') {
    // Each bundle once, however many of its files have this content.
    rows = await sql<BundleListRow[]>`select ${cols} from ${from}
      where b.id in (select distinct f.bundle_id from files f
                     where f.sha256 = decode(${q.hex}, 'hex') and ${beforeId ? sql`f.bundle_id < ${beforeId}::int8` : sql`true`}
                     order by f.bundle_id desc limit ${size + 1})
      order by b.id desc`;
  } else {
    // A code or a name: at most one bundle each.
    const code = q.by === 'vanity' ? sql`false` : sql`b.short_code = ${q.value}`;
    const vanity = q.by === 'code' ? sql`false` : sql`lower(b.vanity) = lower(${q.value})`;
    rows = await sql<BundleListRow[]>`select ${cols} from ${from} where ${code} or ${vanity} order by b.id desc`;
  }
  return page(rows, size, (r) => String(r.id));
}


export interface BundleDetail extends Omit<BundleListRow, 'at'> {
  readonly key_label: string | null;
  readonly max_downloads: number | null;
  readonly is_encrypted: boolean;
  readonly has_password: boolean;
  /** Downloads of all its files. */
  readonly downloads: number;
  /** Its files with no SHA-256 recorded (stored while nothing needed one), and their bytes. */
  readonly unhashed: number;
  readonly unhashed_bytes: number;
}

/** The bundle with this code, whatever its state. */
export async function bundleDetail(sql: Sql, code: string): Promise<BundleDetail | undefined> {
  const [b] = await sql<BundleDetail[]>`
    select ${sql.unsafe(LIST_COLS)}, k.label as key_label, b.max_downloads, b.is_encrypted,
           b.access_password_hash is not null as has_password, s.downloads, s.unhashed, s.unhashed_bytes
    from bundles b left join api_keys k on k.id = b.api_key_id,
         lateral (select coalesce(sum(f.download_count), 0)::int8 as downloads,
                         count(*) filter (where f.sha256 is null)::int as unhashed,
                         coalesce(sum(f.size) filter (where f.sha256 is null), 0)::int8 as unhashed_bytes
                  from files f where f.bundle_id = b.id) s
    where b.short_code = ${code}`;
  return b;
}

export interface ConsoleFile {
  readonly id: number;
  readonly seq: number;
  readonly name: string;
  readonly size: number;
  readonly mime_type: string;
  /** Hex; null when none is recorded yet. */
  readonly sha256: string | null;
  readonly download_count: number;
}

/** A bundle's files in the order they were added, `size` from after `afterSeq` (0: the first). */
export async function bundleFiles(sql: Sql, bundleId: number, afterSeq: number, size: number): Promise<{ rows: ConsoleFile[]; next: number | null }> {
  const rows = await sql<ConsoleFile[]>`
    select id, seq, name, size, mime_type, encode(sha256, 'hex') as sha256, download_count from files
    where bundle_id = ${bundleId} and seq > ${afterSeq} order by seq limit ${size + 1}`;
  const shown = rows.slice(0, size);
  return { rows: shown, next: rows.length > size ? shown[shown.length - 1]!.seq : null };
}

export interface StoredFile {
  readonly id: number;
  readonly storage_key: string;
  readonly size: number;
  readonly sha256: string | null;
}

/** File `fileId` of bundle `bundleId` (undefined when it is not one of its files). */
export async function fileOfBundle(sql: Sql, bundleId: number, fileId: number): Promise<StoredFile | undefined> {
  const [f] = await sql<StoredFile[]>`
    select id, storage_key, size, encode(sha256, 'hex') as sha256 from files where id = ${fileId} and bundle_id = ${bundleId}`;
  return f;
}

/** A bundle's files with no SHA-256 recorded, at most `limit`. */
export const unhashedOfBundle = (sql: Sql, bundleId: number, limit: number): Promise<StoredFile[]> =>
  sql<StoredFile[]>`
    select id, storage_key, size, null as sha256 from files
    where bundle_id = ${bundleId} and sha256 is null order by seq limit ${limit}`;
