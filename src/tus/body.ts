import type { Deps } from '../deps.ts';
import type { Ctx } from '../http/context.ts';
import type { BodyTap } from './patch.ts';
import { BlobError, AppError } from '../errors.ts';
import { completeUpload, completionHeaders } from './complete.ts';
import { recordProgress, setProgress, type TusRow } from '../db/tus-uploads.ts';
import type { UploadLock } from '../db/upload-locks.ts';
import { crc32IsNative } from '../util/crc32.mjs';
import { httpDate, intHeader, type Checksum } from './protocol.ts';
import { EARLY_RECORD_MAX, recordWhileSyncing } from './unsynced.ts';

/** True when the request announces body bytes (a positive Content-Length, or chunked). */
export function hasBody(headers: Readonly<Record<string, string>>): boolean {
  const cl = headers['content-length'];
  if (cl !== undefined) return Number(cl) > 0;
  return /chunked/i.test(headers['transfer-encoding'] ?? '');
}

/**
 * Appends this request's body at `row.upload_offset` and records the new offset. The answer waits
 * until the bytes are durable, and a HEAD after any break reports only bytes the server holds: the
 * offset is recorded once they are synced, or while they are (recordWhileSyncing), marked until then.
 * With a checksum, the body counts only when complete and matching (else the append is cut back, 460).
 * At the final offset the upload is completed into its bundle. Returns the reply headers.
 *
 * `hold` is the PATCH's lock on the upload; with `lastUse`, its caller does nothing more under it,
 * and unless the upload completes here the lock goes with the offset's record, in one round trip.
 */
export async function appendBody(
  ctx: Ctx,
  deps: Deps,
  tap: BodyTap | null,
  row: TusRow,
  checksum: Checksum | null,
  /** Null for an upload being created: no one else knows its id yet. */
  hold: { readonly lock: UploadLock; readonly lastUse: boolean } | null,
): Promise<Array<readonly [string, string]>> {
  const start = row.upload_offset;
  const length = row.upload_length;
  let offset = start;
  const completes = (at: number): boolean => length !== null && at === length && row.concat !== 'partial';
  /** A body of `announced` bytes (undefined: chunked) can go on record before its sync: see recordWhileSyncing. */
  const mayRecordEarly = (announced: number | undefined): boolean =>
    announced === undefined || (announced <= EARLY_RECORD_MAX && !completes(start + announced));
  const record = (at: number): Promise<void> =>
    hold ? recordProgress(hold.lock, row.id, at, length, hold.lastUse && !completes(at)) : setProgress(deps.sql, row.id, at, length);
  if (tap) {
    const limit = length ?? row.max_bytes;
    // A partial upload is never digested itself (its final upload digests the joined file).
    const appender = await deps.blobs.append(row.id, start, { limit, hashAhead: row.concat !== 'partial' }).catch((err: unknown) => {
      // Upload locks keep appends apart; the store refuses a second one at once besides.
      if (err instanceof BlobError && err.code === 'BUSY') throw new AppError('UPLOAD_LOCKED', 'Another request is writing to this upload');
      throw err;
    });
    // A plain append under the PATCH's lock that leaves the upload unfinished, to a store that can check
    // an unsynced range later, may go on record while it syncs; its body's CRC-32 is what that check compares.
    const early =
      hold?.lastUse === true && checksum === null && row.concat !== 'partial' && deps.blobs.checkUnsynced !== undefined && crc32IsNative &&
      mayRecordEarly(intHeader(ctx.headers, 'content-length'));
    const r = await tap.pipe(appender, limit, checksum?.algorithm ?? null, early ? EARLY_RECORD_MAX : 0);
    let failure = r.error;
    const mismatch = checksum !== null && !(r.complete && r.digest?.equals(checksum.digest));
    if (mismatch && r.complete) failure = new AppError('CHECKSUM_MISMATCH', 'Upload-Checksum does not match the body');
    const end = start + r.received;
    if (early && hold && r.complete && !failure && r.crc32 !== null && !completes(end)) {
      offset = await recordWhileSyncing(appender, hold.lock, row, { from: start, to: end, crc32: r.crc32 });
    } else {
      // Durable before the offset is recorded; a checksum that did not match drops the whole body.
      const f = await appender.finish(mismatch ? { cutTo: start } : {});
      offset = f.offset;
      failure ??= f.error;
      if (offset !== start || length !== null) {
        await record(offset);
        // This request's own append ended there (see BlobStore.recorded).
        deps.blobs.recorded?.(row.id, offset);
      }
      if (failure) throw failure;
    }
    if (ctx.aborted) return [];
  } else if (length !== null) await record(offset);

  const headers: Array<readonly [string, string]> = [
    ['Upload-Offset', String(offset)],
    ['Upload-Expires', httpDate(row.expires_at)],
  ];
  // A partial upload stays a piece until a final upload joins it (concat.ts).
  if (completes(offset)) {
    const done = await completeUpload(deps, { ...row, upload_offset: offset });
    if (done.viaRequest) return headers; // an upload request's sender learns nothing of the bundle
    headers.push(...completionHeaders(done.bundle, done.fileId, done.uploadToken));
  }
  return headers;
}
