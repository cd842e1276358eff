import { randomHex } from '../util/random.ts';
import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';
import type { Deps } from '../deps.ts';
import type { Caller } from '../auth/caller.ts';
import { tapBody, type BodyTap } from './patch.ts';
import { appendBody, hasBody } from './body.ts';
import { asCompleted, finishedHeaders, recoverCompletion, refuseInactive, settleCompletion } from './complete.ts';
import { findDownloadableFile } from '../db/files.ts';
import { changeState } from '../db/bundle-room.ts';
import { mayChange, refuseChange } from '../bundles/guard.ts';
import { sendStoredFile } from '../routes/download.ts';
import { removeOneFile } from '../routes/bundle.ts';
import { removeObjects } from '../storage/remove.ts';
import { AppError } from '../errors.ts';
import { deleteUpload, findUpload, holdUpload, releaseAhead, reserveAhead, takeUpload, type TusRow } from '../db/tus-uploads.ts';
import { offsetHeld, settleUnsynced } from './unsynced.ts';
import type { UploadLock } from '../db/upload-locks.ts';
import { checkResumable, httpDate, intHeader, NO_STORE, OFFSET_TYPE, parseChecksum, replyError, UPLOAD_ID_RE } from './protocol.ts';

// The requests made to one upload's URL: HEAD, PATCH, DELETE and GET (its bytes, once finished).

const MiB = 1 << 20;

/**
 * How many requests one upload may make to its URL (PATCH, HEAD, OPTIONS, GET): 100, plus 2 per
 * MiB of its length, or of the bytes it has received while the length is deferred (each PATCH of
 * half a MiB or more then earns its own room). A client sending 1 MiB pieces with a retry each
 * stays within it; a loop hammering one upload does not.
 */
export const requestBound = (row: Pick<TusRow, 'upload_length' | 'upload_offset'>): number =>
  100 + 2 * Math.ceil((row.upload_length ?? row.upload_offset) / MiB);

/** The live upload each admitted request to an upload's URL names (see admitToUpload). */
const admitted = new WeakMap<Ctx, TusRow>();
/** A PATCH's hold on its upload, taken at admission (null: another request holds it); see takeHold. */
const holds = new WeakMap<Ctx, UploadLock | null>();

/** The live upload this request was admitted to, or undefined when it names none. */
export const uploadOf = (ctx: Ctx): TusRow | undefined => admitted.get(ctx);

/**
 * Admits a request to an upload's URL (the server runs it before the handler). A live upload's
 * requests are counted against its own bound (requestBound, for as long as the upload lives) and
 * leave the hourly budget unspent; a request naming no live upload spends the hourly budget like
 * any other API request, so probing ids costs. The upload is then `uploadOf(ctx)`.
 *
 * A PATCH (`writing`) tries the upload's lock in the same round trip that reads its row, and holds
 * it from here to its answer (takeHold): one round trip less per PATCH than locking in the handler.
 */
export async function admitToUpload(ctx: Ctx, deps: Deps, writing: boolean): Promise<Caller> {
  const id = ctx.params[0] ?? '';
  let row: TusRow | undefined;
  let lock: UploadLock | null = null;
  try {
    if (UPLOAD_ID_RE.test(id)) {
      if (writing) ({ row, lock } = await takeUpload(deps.uploadLocks, id));
      else row = await findUpload(deps.sql, id);
    }
  } catch (err) {
    // The database is out: the answer is an error either way, but it still states the budget.
    await deps.access.admit(ctx).catch(() => {});
    throw err;
  }
  let caller: Caller;
  try {
    if (!row || row.is_expired) {
      await lock?.release();
      return await deps.access.admit(ctx);
    }
    const life = Math.max(1000, row.expires_at.getTime() - Date.now());
    caller = await deps.access.admitWithin(ctx, `tus:${row.id}`, requestBound(row), life);
  } catch (err) {
    await lock?.release();
    throw err;
  }
  admitted.set(ctx, row);
  if (writing) {
    holds.set(ctx, lock);
    // Gone before its handler ran (the server then skips it): the hold goes with the request.
    ctx.onAbort(() => void takeHold(ctx)?.release());
  }
  return caller;
}

/** The PATCH's hold, now the caller's to release (null: another request holds the lock). Once only. */
function takeHold(ctx: Ctx): UploadLock | null {
  const lock = holds.get(ctx) ?? null;
  holds.delete(ctx);
  return lock;
}

/** Logged with the route, never the path: an upload's id is all it takes to write to it or delete it. */
export const logFailure = (deps: Deps, ctx: Ctx) => (err: unknown): void =>
  deps.log.error({ err, reqId: ctx.id, route: `${ctx.method.toUpperCase()} /api/v1/tus/:id` }, 'tus request failed');

export function notFound(): AppError {
  return new AppError('UPLOAD_NOT_FOUND', 'Upload not found or expired');
}

export async function head(ctx: Ctx, deps: Deps): Promise<void> {
  try {
    let row = uploadOf(ctx);
    checkResumable(ctx.headers);
    if (!row) throw notFound();
    // Its bundle committed, and then the process died before its row said so: found and recorded now.
    const recovered = await recoverCompletion(deps, row);
    if (recovered) row = asCompleted(row, recovered);
    // All its bytes are here but it is no file yet (a failed or cut-off final PATCH): completed now.
    row = await settleCompletion(deps, row, {
      gone: () => ctx.aborted || ctx.done,
      late: (err) => replyError(ctx, err, logFailure(deps, ctx)),
    });
    const headers: Array<readonly [string, string]> = [
      ...NO_STORE,
      ['Upload-Offset', String(offsetHeld(deps, row))],
      row.upload_length === null ? ['Upload-Defer-Length', '1'] : ['Upload-Length', String(row.upload_length)],
      ['Upload-Expires', httpDate(row.expires_at)],
    ];
    if (row.metadata !== '') headers.push(['Upload-Metadata', row.metadata]);
    if (row.concat !== null) headers.push(['Upload-Concat', row.concat]);
    // Finished: what its completion told, for a client that resumes after losing that answer.
    headers.push(...(await finishedHeaders(deps, row)));
    send(ctx, 200, '', headers);
  } catch (err) {
    replyError(ctx, err, logFailure(deps, ctx));
  }
}

/**
 * Runs `work` holding the upload's lock (db/upload-locks.ts); it is released before the answer goes
 * out, so a client's next PATCH right after a 204 never meets its own lock.
 */
async function withLock<T>(deps: Deps, id: string, work: (row: TusRow, lock: UploadLock) => Promise<T>): Promise<T> {
  if (!UPLOAD_ID_RE.test(id)) throw notFound();
  const held = await holdUpload(deps.uploadLocks, id);
  if (held === 'locked') throw new AppError('UPLOAD_LOCKED', 'Another request is writing to this upload');
  if (!held) throw notFound();
  return underLock(held.lock, held.row, work);
}

/**
 * Runs `work` on `row`, read under `lock`, and lets the lock go once it is done; with `answer`, right
 * after answering with what `work` returned. The unlock is sent in the same turn as the answer, so
 * this process's next take of the upload, which cannot come sooner than the client's next request,
 * goes behind it on the lock session; another process's retries a refusal (db/upload-locks.ts).
 */
async function underLock<T>(
  lock: UploadLock,
  row: TusRow,
  work: (row: TusRow, lock: UploadLock) => Promise<T>,
  answer?: (value: T) => void,
): Promise<T> {
  try {
    if (row.is_expired) throw notFound();
    const value = await work(row, lock);
    answer?.(value);
    return value;
  } finally {
    await lock.release();
  }
}

export async function patch(ctx: Ctx, deps: Deps): Promise<void> {
  const hold = takeHold(ctx);
  const live = uploadOf(ctx);
  const h = ctx.headers;
  const tap: BodyTap | null = hasBody(h) ? tapBody(ctx) : null;
  try {
    // A PATCH is an upload: a Bearer that is not an active key is refused (401), as on any upload.
    deps.access.uploaderFor(await deps.access.callerOf(ctx));
    checkResumable(h);
    if (!live) throw notFound();
    if ((h['content-type'] ?? '').split(';')[0]!.trim().toLowerCase() !== OFFSET_TYPE) {
      throw new AppError('WRONG_CONTENT_TYPE', `Content-Type must be ${OFFSET_TYPE}`);
    }
    const offset = intHeader(h, 'upload-offset');
    if (offset === undefined) throw new AppError('INVALID_HEADER', 'Upload-Offset required');
    const checksum = parseChecksum(h['upload-checksum']);
    const declared = intHeader(h, 'upload-length');
    const contentLength = intHeader(h, 'content-length');
    if (!hold) throw new AppError('UPLOAD_LOCKED', 'Another request is writing to this upload');
    await underLock(hold, live, async (taken, lock) => {
      const row = await settleUnsynced(deps, taken, lock, offset);
      if (row.concat !== null && row.concat !== 'partial') {
        throw new AppError('FINAL_UPLOAD', 'A final upload takes no PATCH: its bytes are its partial uploads\'');
      }
      // For every byte and for completion: see refuseInactive.
      refuseInactive(row);
      if (offset !== row.upload_offset) {
        throw new AppError('OFFSET_MISMATCH', `Upload-Offset ${offset} does not match the upload's offset ${row.upload_offset}`);
      }
      if (row.completed_at !== null) {
        // Nothing is left to send: any body goes past the length, as it would one byte before the end.
        if (tap) throw new AppError('UPLOAD_TOO_LARGE', 'The upload is complete: a body goes past its Upload-Length');
        return [['Upload-Offset', String(row.upload_offset)], ['Upload-Expires', httpDate(row.expires_at)]] as const;
      }
      let maxBytes = row.max_bytes;
      if (row.bundle_id !== null) {
        // An append: its bytes are refused as soon as the bundle guard refuses adding to the bundle
        // (expired, quarantined, its request closed, its key revoked), not only at completion. A
        // deferred length reserved only what arrived, so the room left now bounds it.
        const target = await changeState(deps.sql, row.bundle_id, row.id);
        if (!target) throw notFound();
        refuseChange(target, 'add', 'holder');
        if (row.upload_length === null) maxBytes = Math.min(maxBytes, target.room);
      }
      let length = row.upload_length;
      if (declared !== undefined) {
        if (length !== null && declared !== length) throw new AppError('INVALID_LENGTH', 'Upload-Length cannot change');
        if (declared < offset) throw new AppError('INVALID_LENGTH', 'Upload-Length is below the offset');
        if (declared > maxBytes) throw new AppError('UPLOAD_TOO_LARGE', 'Upload-Length exceeds the size limit');
        length = declared;
      }
      if (contentLength !== undefined && offset + contentLength > (length ?? maxBytes)) {
        throw new AppError('UPLOAD_TOO_LARGE', 'Body goes past Upload-Length or the size limit');
      }
      const next = { ...row, upload_length: length, max_bytes: maxBytes };
      // A deferred append holds only what it received: the room this PATCH may fill is reserved
      // first, so two of them can never both write past the room and then both fail to complete.
      if (row.bundle_id === null || row.upload_length !== null || !tap) return appendBody(ctx, deps, tap, next, checksum, { lock, lastUse: true });
      const upTo = length ?? (contentLength !== undefined ? offset + contentLength : maxBytes);
      await reserveAhead(deps.sql, row.id, row.bundle_id, upTo, mayChange('add', 'holder'));
      try {
        return await appendBody(ctx, deps, tap, next, checksum, { lock, lastUse: false });
      } finally {
        await releaseAhead(deps.sql, row.id).catch(logFailure(deps, ctx));
      }
    }, (headers) => send(ctx, 204, '', [...NO_STORE, ...headers]));
  } catch (err) {
    tap?.cancel();
    // Refused before underLock took the hold over (it lets go on failure itself): the hold goes before the answer.
    await hold?.release();
    replyError(ctx, err, logFailure(deps, ctx), tap !== null);
  }
}

/**
 * Termination. An unfinished upload loses its session and part. A finished one became a file of
 * its bundle: terminating it deletes that file as DELETE /api/v1/file/{id} would (the upload URL is
 * a secret only its uploader holds, like the upload token), refused once the bundle has expired.
 * Either way the URL answers 404 afterwards. Spends the hourly budget once, like a creation.
 */
export async function terminate(ctx: Ctx, deps: Deps): Promise<void> {
  const id = ctx.params[0] ?? '';
  try {
    checkResumable(ctx.headers);
    // The row goes under the lock, the bytes after the answer, which a slow store must not hold (the
    // sweeper reclaims what a crash leaves): an unfinished upload's part, or a finished one's file, as
    // DELETE /api/v1/file/{id} takes it.
    let removeBytes = async (): Promise<void> => {};
    await withLock(deps, id, async (row) => {
      if (row.completed_at === null) {
        await deleteUpload(deps.sql, row.id);
        if (row.bundle_id !== null) deps.bundles.invalidate(row.bundle_id); // its reservation is free again
        removeBytes = () => deps.blobs.removeResumable(id).catch((err: unknown) => deps.log.warn({ err }, 'terminated upload\'s part not removed'));
        return;
      }
      // Removing the file is a change to its bundle: the guard decides (a closed request's sender
      // removes nothing from the owner's bundle), before the upload's row goes.
      const state = row.bundle_id === null ? undefined : await changeState(deps.sql, row.bundle_id);
      if (state) refuseChange(state, 'remove-file', 'holder');
      const file = row.file_id === null ? undefined : await findDownloadableFile(deps.sql, row.file_id);
      const key = file ? await removeOneFile(deps, file.id, file.bundle_id) : undefined;
      await deleteUpload(deps.sql, row.id);
      if (key !== undefined) removeBytes = () => removeObjects(deps.blobs, [key], deps.log);
    });
    send(ctx, 204, '', NO_STORE);
    await removeBytes();
  } catch (err) {
    replyError(ctx, err, logFailure(deps, ctx));
  }
}

/**
 * GET: a finished upload's bytes, as tusd serves them, through the one download path (Range,
 * validators, the bundle's password gate: a locked file is hidden, 404, until an access token is
 * shown). An unfinished upload has no bytes to serve yet (404).
 */
export async function serveFinished(ctx: Ctx, deps: Deps): Promise<void> {
  try {
    const row = uploadOf(ctx);
    if (!row) throw notFound();
    if (row.completed_at === null) throw new AppError('UPLOAD_UNFINISHED', 'The upload is not finished yet');
    // A partial upload joined into a final one has no file of its own.
    if (row.file_id === null) throw notFound();
    const file = await findDownloadableFile(deps.sql, row.file_id);
    const caller = await deps.access.callerOf(ctx);
    if (!file || !deps.access.canRead(ctx, caller, { ...file, id: file.bundle_id })) throw new AppError('FILE_NOT_FOUND');
    await sendStoredFile(ctx, deps, file);
  } catch (err) {
    replyError(ctx, err, logFailure(deps, ctx));
  }
}
