// An append whose offset goes on record while its bytes are synced, and how a later request settles
// such a range when it cannot know that the sync finished (after a crash, a restart, on another node).
import type { Deps } from '../deps.ts';
import { clearOnRelease, recordProgress, type TusRow } from '../db/tus-uploads.ts';
import type { UploadLock } from '../db/upload-locks.ts';
import type { BlobAppender, UnsyncedRange } from '../storage/blob-store.ts';

/**
 * The most bytes a PATCH puts on record before they are synced (recordWhileSyncing): whoever next
 * takes the upload without knowing that sync finished reads them back. A larger PATCH waits for its
 * sync, which its size dwarfs anyway.
 */
export const EARLY_RECORD_MAX = 64 << 20;

/**
 * Records the append's new offset while its last writes are synced instead of after, one round trip
 * off the PATCH: the row marks the range as not known synced, with its CRC-32. The answer still waits
 * for both, so an acknowledged offset is durable. A failed sync is taken off the record before the lock
 * goes; a crash in between leaves the mark, which whoever takes the upload next settles
 * (settleUnsynced). Resolves with the new offset.
 */
export async function recordWhileSyncing(appender: BlobAppender, lock: UploadLock, row: TusRow, range: UnsyncedRange): Promise<number> {
  const [synced, recorded] = await Promise.allSettled([
    appender.finish({ crc32: range.crc32 }),
    recordProgress(lock, row.id, range.to, row.upload_length, false, { from: range.from, crc32: range.crc32 }),
  ]);
  const f = synced.status === 'fulfilled' ? synced.value : { offset: range.from, error: synced.reason as Error };
  if (f.offset === range.to && f.error === null) {
    if (recorded.status === 'rejected') throw recorded.reason;
    // Known synced: the mark goes with the lock, which the caller releases once it has answered.
    clearOnRelease(lock, row.id, range.from, range.to);
    return range.to;
  }
  // The sync failed and the appender dropped the bytes: the record must not name them.
  if (recorded.status === 'fulfilled') await recordProgress(lock, row.id, f.offset, row.upload_length, false);
  throw f.error ?? new Error(`append ended at ${f.offset} instead of ${range.to}`);
}

/** The range an append put on record before its sync was known done (recordWhileSyncing), if any. */
function unsyncedOf(row: TusRow): UnsyncedRange | null {
  if (row.unsynced_from === null || row.unsynced_crc === null) return null;
  return { from: row.unsynced_from, to: row.upload_offset, crc32: row.unsynced_crc };
}

/** The offset a HEAD reports: bytes on record but not known synced count once a PATCH has checked them (settleUnsynced). */
export function offsetHeld(deps: Deps, row: TusRow): number {
  const range = unsyncedOf(row);
  return range === null || deps.blobs.syncedHere?.(row.id, range) === true ? row.upload_offset : range.from;
}

/**
 * A PATCH took an upload whose last append is on record, but not known synced here (after a crash,
 * a restart, or on another node). A client resuming from before that range has it dropped unread:
 * it sends those bytes again. Otherwise the range is read back: whole, matching its CRC-32 and now
 * synced, it stands; if not, it is dropped. Dropping puts the offset back where the range started,
 * and the append that follows cuts the part there.
 */
export async function settleUnsynced(deps: Deps, row: TusRow, lock: UploadLock, clientOffset: number): Promise<TusRow> {
  const range = unsyncedOf(row);
  if (range === null) return row;
  if (clientOffset !== range.from && (await deps.blobs.checkUnsynced?.(row.id, range)) === true) return row;
  await recordProgress(lock, row.id, range.from, row.upload_length, false);
  return { ...row, upload_offset: range.from, unsynced_from: null, unsynced_crc: null };
}
