import type { BundleRow, FileRow, FileSummary } from './rows.ts';
import { listFilesInPages } from './file-pages.ts';
import type { Sql } from './sql.ts';
import { AppError } from '../errors.ts';
import { newShortCode } from '../util/tokens.ts';
import { ACTIVE_BUNDLE, BUNDLE_COLS, lockForChange, tusReserved, type ChangeCheck } from './bundle-room.ts';
import { refuseQuarantined } from './quarantine.ts';
import { blockedAmong } from './abuse.ts';
import { filesJson, queueBundleEvents, queueEventsSql, queueFilesEvent } from './webhooks.ts';

/** A new bundle's fields once checked (the password already hashed), and the uploader's limits. */
export interface NewBundleFields {
  description: string | null;
  accessPasswordHash: string | null;
  notifyEmail: string | null;
  isEncrypted: boolean;
  maxSizeBytes: number;
  /** null: never expires. */
  expiryDays: number | null;
  /** A Premium bundle's vanity name (bundles/vanity.ts); absent in tus rows written before it. */
  vanity?: string | null;
  /** Complete downloads allowed of each file, 1–1000 (bundles/limits.ts); null or absent: no limit. */
  maxDownloads?: number | null;
}

export interface NewFile {
  storageKey: string;
  name: string;
  size: number;
  mimeType: string;
  crc32: number;
  /** Lowercase hex, when the store computed it (the blocklist finds bundles by it). */
  sha256?: string | null;
}

export interface NewBundle {
  uploadTokenHash: Buffer;
  description: string | null;
  accessPasswordHash: string | null;
  notifyEmail: string | null;
  isEncrypted: boolean;
  apiKeyId: number | null;
  maxSizeBytes: number;
  /** null: never expires. */
  expiresAt: Date | null;
  /** Complete downloads allowed of each file; null or absent: no limit. */
  maxDownloads?: number | null;
}

/**
 * Runs `insert` again when a new file's random id was drawn twice (sql/0019_random_file_ids.sql:
 * about once in 10^9 inserts among 10^7 files); the statement or transaction failed whole.
 */
export async function withFreshFileIds<T>(insert: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await insert();
    } catch (err) {
      const e = err as { code?: string; constraint_name?: string };
      if (attempt < 3 && e.code === '23505' && e.constraint_name === 'files_pkey') continue;
      throw err;
    }
  }
}

/** Zero-byte files pass the size cap; this bounds what one bundle's listing and zip must hold. */
export const MAX_FILES_PER_BUNDLE = 10_000;

const FILE_COLS = ['id', 'bundle_id', 'storage_key', 'name', 'size', 'mime_type', 'crc32', 'download_count', 'downloads_done', 'created_at'];
const FILE_COLS_AS = FILE_COLS.map((c) => `f.${c} as file__${c}`).join(', ');

/** One bundle to create with its files (at least one), and what creating it gave. */
export interface BundleInsert {
  bundle: NewBundle;
  files: NewFile[];
}
export interface InsertedBundle {
  bundle: BundleRow;
  files: FileRow[];
}

/**
 * Creates several bundles and their file rows in ONE statement, atomic by itself: one round trip and
 * one commit for all of them. Each item gets a fresh short code; an item whose code is already taken
 * comes back as null (nothing of it is written) for the caller to retry. File ids follow the order
 * of each item's `files`. Any other failure fails the whole statement, and nothing is written.
 */
export async function insertBundles(
  sql: Sql,
  items: BundleInsert[],
  newCode: () => string = newShortCode,
): Promise<(InsertedBundle | null)[]> {
  if (items.some((it) => it.files.length === 0)) throw new Error('a new bundle needs at least one file');
  // Codes unique within the statement: a duplicate would be skipped by the conflict clause while its
  // files joined the twin's row.
  const codes = new Set<string>();
  const codeOf = items.map(() => {
    let c = newCode();
    while (codes.has(c)) c = newCode();
    codes.add(c);
    return c;
  });
  const bs = items.map((it) => it.bundle);
  const fileList = items.flatMap((it, i) => it.files.map((f) => ({ n: i + 1, f })));
  // Arrays go as text where postgres.js cannot type them (booleans, nullable numbers and times).
  const rows = await sql<Record<string, unknown>[]>`
    with x as (
      select * from unnest(${codeOf}::text[], ${bs.map((b) => b.uploadTokenHash.toString('hex'))}::text[],
                           ${bs.map((b) => b.description)}::text[], ${bs.map((b) => b.accessPasswordHash)}::text[],
                           ${bs.map((b) => b.notifyEmail)}::text[], ${bs.map((b) => (b.isEncrypted ? 't' : 'f'))}::text[],
                           ${bs.map((b) => (b.apiKeyId === null ? null : String(b.apiKeyId)))}::text[],
                           ${bs.map((b) => b.maxSizeBytes)}::int8[],
                           ${items.map((it) => it.files.reduce((n, f) => n + f.size, 0))}::int8[],
                           ${items.map((it) => it.files.length)}::int4[],
                           ${bs.map((b) => (b.expiresAt === null ? null : b.expiresAt.toISOString()))}::text[],
                           ${bs.map((b) => (b.maxDownloads == null ? null : String(b.maxDownloads)))}::text[])
             with ordinality as x(short_code, token_hex, description, password_hash, notify_email, encrypted, api_key_id,
                                  max_size, total_size, file_count, expires_at, max_downloads, n)
    ), b as (
      insert into bundles (short_code, upload_token_hash, description, access_password_hash, notify_email,
                           is_encrypted, api_key_id, max_size_bytes, total_size_bytes, file_count, expires_at, max_downloads)
      select short_code, decode(token_hex, 'hex'), description, password_hash, notify_email,
             encrypted::boolean, api_key_id::int8, max_size, total_size, file_count, expires_at::timestamptz, max_downloads::int4
      from x order by n
      on conflict (short_code) do nothing
      returning *
    ), f as (
      insert into files (bundle_id, storage_key, name, size, mime_type, crc32, sha256)
      select b.id, y.storage_key, y.name, y.size, y.mime_type, y.crc32, decode(y.sha256, 'hex')
      from unnest(${fileList.map((e) => e.n)}::int8[], ${fileList.map((e) => e.f.storageKey)}::text[], ${fileList.map((e) => e.f.name)}::text[],
                  ${fileList.map((e) => e.f.size)}::int8[], ${fileList.map((e) => e.f.mimeType)}::text[],
                  ${fileList.map((e) => e.f.crc32)}::int8[], ${fileList.map((e) => e.f.sha256 ?? null)}::text[])
           with ordinality as y(bundle_n, storage_key, name, size, mime_type, crc32, sha256, m)
      join x on x.n = y.bundle_n
      join b on b.short_code = x.short_code
      order by y.m
      returning *
    ), e as (
      ${sql.unsafe(queueEventsSql('bundle.created', `select b.api_key_id, b.short_code, ${filesJson('f where f.bundle_id = b.id')} as files from b where b.api_key_id is not null`))}
    )
    select b.*, false as is_expired, ${sql.unsafe(FILE_COLS_AS)} from b join f on f.bundle_id = b.id order by f.seq`;
  const byCode = new Map<string, InsertedBundle>();
  for (const r of rows) {
    const code = r.short_code as string;
    let got = byCode.get(code);
    if (!got) {
      const bundle: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(r)) if (!k.startsWith('file__')) bundle[k] = v;
      got = { bundle: bundle as unknown as BundleRow, files: [] };
      byCode.set(code, got);
    }
    got.files.push(Object.fromEntries(FILE_COLS.map((c) => [c, r[`file__${c}`]])) as unknown as FileRow);
  }
  return codeOf.map((c) => byCode.get(c) ?? null);
}

/** The SHA-256s (hex) recorded with `files`: there are some only while something is blocked or a scanner reads uploads. */
export const hashesOf = (files: NewFile[]): string[] => files.flatMap((f) => (f.sha256 ? [f.sha256] : []));

async function insertFiles(tx: Sql, bundleId: number, files: NewFile[]): Promise<FileRow[]> {
  const rows: FileRow[] = [];
  // One statement per file keeps `seq` in upload order; bundles rarely hold more than a handful per request.
  for (const f of files) {
    const [row] = await tx<FileRow[]>`
      insert into files (bundle_id, storage_key, name, size, mime_type, crc32, sha256)
      values (${bundleId}, ${f.storageKey}, ${f.name}, ${f.size}, ${f.mimeType}, ${f.crc32}, decode(${f.sha256 ?? null}::text, 'hex'))
      returning *`;
    rows.push(row!);
  }
  return rows;
}

/**
 * Adds files to a bundle under a row lock, so concurrent appends can never together pass the cap
 * (less what tus uploads reserved). `completingTus` is the tus upload these files finish: its own
 * reservation is the room it uses, and it is marked completed in the same transaction, so no
 * concurrent append ever sees its bytes counted twice (as a file and as a reservation).
 * Throws what `check` (bundles/guard.ts) refuses, or SIZE_EXCEEDED (nothing is written then).
 */
export async function appendFiles(
  sql: Sql,
  bundleId: number,
  files: NewFile[],
  check: ChangeCheck,
  completingTus: string | null = null,
  /** A smaller bound on the bundle's files (an upload request's max_files). */
  maxFiles = MAX_FILES_PER_BUNDLE,
): Promise<FileRow[]> {
  const added = files.reduce((n, f) => n + f.size, 0);
  const hashes = hashesOf(files);
  return withFreshFileIds(() => sql.begin(async (tx) => {
    // Before the bundle's row lock: a block takes its lock first and then bundle rows.
    if (hashes.length > 0 && (await blockedAmong(tx as unknown as Sql, hashes)).size > 0) throw new AppError('BLOCKED_CONTENT');
    const b = await lockForChange(tx as unknown as Sql, bundleId, check, completingTus);
    if (!b) throw new AppError('INVALID_UPLOAD_TOKEN');
    if (b.total_size_bytes + b.reserved + added > b.max_size_bytes) throw new AppError('SIZE_EXCEEDED');
    if (b.file_count + files.length > maxFiles) {
      throw maxFiles === MAX_FILES_PER_BUNDLE ? new AppError('TOO_MANY_FILES') : new AppError('TOO_MANY_FILES', `This upload request takes at most ${maxFiles} files`);
    }
    await tx`update bundles set total_size_bytes = total_size_bytes + ${added}, file_count = file_count + ${files.length}
             where id = ${bundleId}`;
    const rows = await insertFiles(tx as unknown as Sql, bundleId, files);
    // Events go to the owner's endpoints; files arriving through an upload request are news of that request.
    const event = b.request_open === null ? 'bundle.files_added' : 'request.upload_received';
    if (b.api_key_id !== null) await queueFilesEvent(tx as unknown as Sql, event, bundleId, rows.map((r) => r.id));
    if (completingTus !== null) {
      await tx`update tus_uploads set completed_at = now(), file_id = ${rows[0]!.id} where id = ${completingTus}`;
    }
    return rows;
  }) as Promise<FileRow[]>);
}

/** An active (unexpired) bundle by code. */
export async function findActiveBundle(sql: Sql, code: string): Promise<BundleRow | undefined> {
  const [b] = await sql<BundleRow[]>`
    select ${sql.unsafe(BUNDLE_COLS)} from bundles b
    where short_code = ${code} and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  return refuseQuarantined(b);
}

/** An active bundle with its file list (the hot read path, behind the bundle cache). */
export async function findActiveBundleWithFiles(
  sql: Sql,
  code: string,
): Promise<(BundleRow & { files: FileSummary[]; tus_reserved: number }) | undefined> {
  const [b] = await sql<Array<BundleRow & { tus_reserved: string }>>`
    select b.*, false as is_expired, ${tusReserved(sql)} as tus_reserved from bundles b
    where b.short_code = ${code} and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  refuseQuarantined(b);
  if (!b) return undefined;
  return { ...b, tus_reserved: Number(b.tus_reserved), files: await listFilesInPages(sql, b.id, 'summary') };
}

/** A bundle by code whether expired or not (status and delete distinguish themselves). */
export async function findBundle(sql: Sql, code: string): Promise<BundleRow | undefined> {
  const [b] = await sql<BundleRow[]>`select ${sql.unsafe(BUNDLE_COLS)} from bundles b where short_code = ${code}`;
  return refuseQuarantined(b);
}

export async function findBundleByTokenHash(sql: Sql, hash: Buffer): Promise<BundleRow | undefined> {
  const [b] = await sql<BundleRow[]>`select ${sql.unsafe(BUNDLE_COLS)} from bundles b where upload_token_hash = ${hash}`;
  return refuseQuarantined(b);
}

export const listFiles = (sql: Sql, bundleId: number): Promise<FileRow[]> =>
  sql<FileRow[]>`select * from files where bundle_id = ${bundleId} order by seq`;

/**
 * Deletes the bundle (files cascade) if `check` allows; returns the storage keys to unlink after
 * commit (none when the bundle was already gone).
 */
export async function deleteBundle(sql: Sql, bundleId: number, check: ChangeCheck): Promise<string[]> {
  return (await (sql.begin((tx) => deleteBundleIn(tx as unknown as Sql, bundleId, check)) as Promise<string[] | null>)) ?? [];
}

/** deleteBundle inside transaction `tx` (so a caller commits its own rows with it); null: the bundle was gone. */
export async function deleteBundleIn(tx: Sql, bundleId: number, check: ChangeCheck): Promise<string[] | null> {
  // Lock the bundle first: an append committing meanwhile would add rows whose keys we never saw.
  const b = await lockForChange(tx, bundleId, check);
  if (!b) return null;
  if (b.api_key_id !== null) await queueBundleEvents(tx, 'bundle.deleted', [bundleId]);
  const keys = await tx<{ storage_key: string }[]>`delete from files where bundle_id = ${bundleId} returning storage_key`;
  await tx`delete from bundles where id = ${bundleId}`;
  return keys.map((k) => k.storage_key);
}

/** A bundle by id whether expired or not. */
export async function findBundleById(sql: Sql, id: number): Promise<BundleRow | undefined> {
  const [b] = await sql<BundleRow[]>`select ${sql.unsafe(BUNDLE_COLS)} from bundles b where id = ${id}`;
  return b;
}
