import type { Sql } from './sql.ts';
import { stillHeld, type UploadLock, type UploadLocks } from './upload-locks.ts';
import { lockForChange, type ChangeCheck } from './bundle-room.ts';
import { AppError } from '../errors.ts';
import type { NewBundleFields } from './bundles.ts';
import { refuseQuarantined } from './quarantine.ts';
import { KEY_ACTIVE } from './api-keys.ts';

export interface TusRow {
  id: string;
  bundle_id: number | null;
  new_bundle: NewBundleFields | null;
  api_key_id: number | null;
  upload_length: number | null;
  upload_offset: number;
  max_bytes: number;
  file_name: string;
  mime_type: string;
  metadata: string;
  /** 'partial', the Upload-Concat value of a final upload ('final;…'), or null. */
  concat: string | null;
  completed_at: Date | null;
  file_id: number | null;
  /** A spent partial: the final upload that joined it. */
  joined_into: string | null;
  expires_at: Date;
  is_expired: boolean;
  /** Started under a key: whether that key is still active (null: no key). */
  key_active: boolean | null;
  /**
   * Where the last append's range starts while its sync is not known done, and the range's CRC-32
   * (both null once it is): see recordProgress and tus/unsynced.ts.
   */
  unsynced_from: number | null;
  unsynced_crc: number | null;
}

export type NewUpload = Omit<
  TusRow,
  'upload_offset' | 'completed_at' | 'file_id' | 'joined_into' | 'is_expired' | 'key_active' | 'unsynced_from' | 'unsynced_crc'
>;

/** An appended range on record before its bytes were synced: [from, the row's offset), and its CRC-32. */
export interface Unsynced {
  readonly from: number;
  readonly crc32: number;
}

// With the quarantine of the bundle it appends to (every request to the upload answers 451 then),
// and the state of the key it was started under, read in the same round trip.
const COLS = `u.*, u.expires_at <= now() as is_expired,
  (select b.quarantined_at from bundles b where b.id = u.bundle_id) as quarantined_at,
  (select ${KEY_ACTIVE} from api_keys k where k.id = u.api_key_id) as key_active`;

export async function insertUpload(sql: Sql, u: NewUpload): Promise<void> {
  await sql`
    insert into tus_uploads (id, bundle_id, new_bundle, api_key_id, upload_length, max_bytes, file_name, mime_type, metadata, concat, expires_at)
    values (${u.id}, ${u.bundle_id}, ${u.new_bundle === null ? null : sql.json(u.new_bundle as never)}, ${u.api_key_id},
            ${u.upload_length}, ${u.max_bytes}, ${u.file_name}, ${u.mime_type}, ${u.metadata}, ${u.concat}, ${u.expires_at})`;
}

/**
 * Room left in a bundle for a new append of `length` bytes: the bundle's cap minus what it holds
 * and what unfinished uploads to it have declared (or received, when their length is deferred).
 * Counted after the bundle's row lock is granted, so concurrent creations cannot both reserve the same room.
 */
export async function reserveInBundle(sql: Sql, bundleId: number, length: number | null, u: NewUpload, check: ChangeCheck): Promise<void> {
  await sql.begin(async (tx) => {
    const b = await lockForChange(tx as unknown as Sql, bundleId, check);
    if (!b) throw new AppError('BUNDLE_EXPIRED');
    const room = b.max_size_bytes - b.total_size_bytes - b.reserved;
    if ((length ?? 0) > room) throw new AppError('UPLOAD_TOO_LARGE', 'Bundle size limit exceeded');
    await insertUpload(tx as unknown as Sql, { ...u, max_bytes: Math.max(0, room) });
  });
}

/** The row of upload `id`, as a query still to be sent (on the pool, or behind a lock's statement). */
const uploadRow = (sql: Sql, id: string) => sql<TusRow[]>`select ${sql.unsafe(COLS)} from tus_uploads u where id = ${id}`;

export async function findUpload(sql: Sql, id: string): Promise<TusRow | undefined> {
  const [row] = await uploadRow(sql, id);
  return refuseQuarantined(row);
}

/**
 * Tries upload `id`'s lock and reads its row in one round trip. `lock` is null while another
 * request holds it, and when there is no such upload (`row` undefined: nothing is held then).
 */
export async function takeUpload(locks: UploadLocks, id: string): Promise<{ lock: UploadLock | null; row: TusRow | undefined }> {
  const { lock, read } = await locks.take(id, (session) => uploadRow(session, id));
  let row: TusRow | undefined;
  try {
    row = refuseQuarantined(read[0]);
  } catch (err) {
    await lock?.release();
    throw err;
  }
  if (row || !lock) return { lock, row };
  await lock.release();
  return { lock: null, row };
}

/** takeUpload's outcome as one value: 'locked' while another request holds the lock, undefined when there is no such upload. */
export async function holdUpload(locks: UploadLocks, id: string): Promise<{ lock: UploadLock; row: TusRow } | 'locked' | undefined> {
  const { lock, row } = await takeUpload(locks, id);
  if (!row) return undefined;
  return lock ? { lock, row } : 'locked';
}

/**
 * Reserves room for a PATCH to deferred-length upload `id` in bundle `bundleId` before its body is
 * read: room for the upload to reach `upTo` bytes, beside what the bundle holds and other uploads
 * reserve, under the bundle's row lock, so two deferred appends can never both stream past the room
 * and then both fail to complete. UPLOAD_TOO_LARGE (nothing reserved) when it does not fit, or what
 * `check` refuses. releaseAhead gives the reservation back once the PATCH ends.
 */
export async function reserveAhead(sql: Sql, id: string, bundleId: number, upTo: number, check: ChangeCheck): Promise<void> {
  await sql.begin(async (tx) => {
    const b = await lockForChange(tx as unknown as Sql, bundleId, check, id);
    if (!b) throw new AppError('BUNDLE_EXPIRED');
    if (upTo > b.max_size_bytes - b.total_size_bytes - b.reserved) throw new AppError('UPLOAD_TOO_LARGE', 'Bundle size limit exceeded');
    await tx`update tus_uploads set reserved_bytes = ${upTo} where id = ${id}`;
  });
}

/** Ends a reservation made by reserveAhead: the upload holds what it received from then on. */
export async function releaseAhead(sql: Sql, id: string): Promise<void> {
  await sql`update tus_uploads set reserved_bytes = 0 where id = ${id} and reserved_bytes > 0`;
}

/**
 * Records durably written bytes (and a length declared late), for an upload no one else can know of
 * yet (its creation). Only called after the bytes are on disk; a PATCH records with recordProgress.
 */
export async function setProgress(sql: Sql, id: string, offset: number, length: number | null): Promise<void> {
  await sql`update tus_uploads set upload_offset = ${offset}, upload_length = ${length}, unsynced_from = null, unsynced_crc = null
            where id = ${id}`;
}

/**
 * setProgress by the request holding `lock`, on the lock's session and only while it holds the
 * lock: a writer whose session was lost meanwhile lost the lock too (another node may be writing
 * now), gets 503 and records nothing. With `release`, the lock goes right behind it in the same
 * round trip. With `unsynced`, the bytes from `unsynced.from` to `offset` are still being synced,
 * and the row says so (without, it says every byte below `offset` is durable).
 */
export async function recordProgress(
  lock: UploadLock,
  id: string,
  offset: number,
  length: number | null,
  release: boolean,
  unsynced: Unsynced | null = null,
): Promise<void> {
  const lost = (cause?: unknown) => new AppError('UNAVAILABLE', 'The upload was released while this request wrote to it; resume from HEAD', { cause });
  const r = await lock
    .write(
      (session) => session`update tus_uploads set upload_offset = ${offset}, upload_length = ${length},
                             unsynced_from = ${unsynced?.from ?? null}, unsynced_crc = ${unsynced?.crc32 ?? null}
                           where id = ${id} and ${stillHeld(session, lock)}`,
      release,
    )
    .catch((err: unknown) => {
      // The session broke under the write (its socket, or its backend ended): the lock went with it,
      // whether or not the record landed. A statement PostgreSQL refused is another matter.
      const sqlstate = (err as { name?: string; code?: string }).name === 'PostgresError' ? (err as { code: string }).code : null;
      throw sqlstate === null || /^(08|57)/.test(sqlstate) ? lost(err) : err;
    });
  if (r.count === 0) throw lost();
}

/**
 * Clears, when `lock` is released, the mark recordProgress left for [from, to), whose bytes are now
 * synced, unless the row moved on meanwhile. Nothing waits for the clear: one that is lost (it is
 * behind the release, and its commit does not wait for its flush) costs only a check of the range.
 */
export function clearOnRelease(lock: UploadLock, id: string, from: number, to: number): void {
  lock.releaseWith(
    (session) => session`update tus_uploads set unsynced_from = null, unsynced_crc = null
                         where id = ${id} and unsynced_from = ${from} and upload_offset = ${to}`,
  );
}

export async function markCompleted(sql: Sql, id: string, fileId: number, bundleId: number): Promise<void> {
  await sql`update tus_uploads set completed_at = now(), file_id = ${fileId}, bundle_id = ${bundleId} where id = ${id}`;
}

export async function deleteUpload(sql: Sql, id: string): Promise<void> {
  await sql`delete from tus_uploads where id = ${id}`;
}

/** Partial uploads joined into final upload `into`: finished, with no file of their own. */
export async function markSpent(sql: Sql, ids: readonly string[], into: string): Promise<void> {
  await sql`update tus_uploads set completed_at = now(), joined_into = ${into} where id = any(${ids as string[]})`;
}

/** What a finished upload's answer names of its bundle (undefined: the bundle is gone). */
export async function answerOfBundle(sql: Sql, bundleId: number): Promise<{ short_code: string; vanity: string | null; upload_token_hash: Uint8Array; via_request: boolean } | undefined> {
  const [b] = await sql<{ short_code: string; vanity: string | null; upload_token_hash: Uint8Array; via_request: boolean }[]>`
    select b.short_code, b.vanity, b.upload_token_hash, exists (select 1 from upload_requests r where r.bundle_id = b.id) as via_request
    from bundles b where b.id = ${bundleId}`;
  return b;
}

/** Deletes up to 200 expired sessions (skipping rows another sweeper holds); completed ones have no object left. */
export function deleteExpiredUploads(sql: Sql): Promise<Array<{ id: string; completed: boolean }>> {
  return sql<{ id: string; completed: boolean }[]>`
    delete from tus_uploads where id in (
      select id from tus_uploads where expires_at <= now() limit 200 for update skip locked)
    returning id, completed_at is not null as completed`;
}

/** Which of these ids still have a session row. */
export async function knownUploadIds(sql: Sql, ids: string[]): Promise<Set<string>> {
  return new Set((await sql<{ id: string }[]>`select id from tus_uploads where id = any(${ids})`).map((r) => r.id));
}
