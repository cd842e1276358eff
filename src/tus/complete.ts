import { setTimeout as delay } from 'node:timers/promises';
import type { Deps } from '../deps.ts';
import type { NewFile } from '../db/bundles.ts';
import type { BundleRow } from '../db/rows.ts';
import { createFromParts } from '../bundles/service.ts';
import { answerOfBundle, deleteUpload, holdUpload, markCompleted, type TusRow } from '../db/tus-uploads.ts';
import type { UploadLock } from '../db/upload-locks.ts';
import { hashSecret, secretMatches } from '../util/tokens.ts';
import { findBundleByTokenHash, listFiles } from '../db/bundles.ts';
import { appendToBundle } from '../bundles/requests.ts';
import { AppError } from '../errors.ts';
import { ANSWER_WAIT_MS } from '../http/server.ts';

export interface Completed {
  readonly bundle: BundleRow;
  readonly fileId: number;
  /** Only for a new bundle: its upload token, shown once. */
  readonly uploadToken: string | null;
  /** Sent through an upload request: the sender is told nothing of the bundle. */
  readonly viaRequest?: boolean;
}

/**
 * Turns a finished upload into a normal file of its bundle, exactly like the multipart path: the
 * store publishes the resumable object under a new storage key (exactly the bytes on record), then
 * the rows are inserted (a new bundle, or an append under the bundle's row lock). If the rows
 * cannot be written the object goes back to being the upload's, so the upload stays complete-able
 * (an empty PATCH at the final offset, or a HEAD, retries).
 */
export async function completeUpload(deps: Deps, row: TusRow): Promise<Completed> {
  let published: Awaited<ReturnType<Deps['blobs']['completeResumable']>>;
  try {
    published = await deps.blobs.completeResumable(row.id, row.upload_offset);
  } catch (err) {
    // A refused file (malware, blocked content: see abuse/inspected-store.ts) is gone already; its
    // upload goes too, so nothing of it is kept and later requests to it answer 404.
    if (err instanceof AppError && err.status === 422) await deleteUpload(deps.sql, row.id);
    // Its object gone (on disk, ENOENT; in a bucket, no such upload) because it was published and
    // made into a bundle before, and the process died before the row said so.
    const recovered = await recoverCompletion(deps, row).catch(() => null);
    if (recovered) return recovered;
    throw err;
  }
  const { key, digest } = published;
  const file: NewFile = {
    storageKey: key, name: row.file_name, size: digest.size, mimeType: row.mime_type, crc32: digest.crc32, sha256: digest.sha256,
  };
  let done: Completed;
  try {
    if (row.bundle_id !== null) {
      const { rows, bundle, viaRequest } = await appendToBundle(deps, row.bundle_id, [file], row.id);
      done = { bundle, fileId: rows[0]!.id, uploadToken: null, viaRequest };
    } else {
      const created = await createFromParts(deps, row.new_bundle!, row.api_key_id, [file], deps.signer.tusUploadToken(row.id));
      done = { bundle: created.bundle, fileId: created.files[0]!.id, uploadToken: created.uploadToken };
    }
  } catch (err) {
    if (err instanceof AppError && err.code === 'BLOCKED_CONTENT') {
      // Blocked while the upload finished (see blockedAmong): refused like one blocked before.
      await deps.blobs.delete(key).catch(() => {}); // else an orphan the sweeper removes
      await deleteUpload(deps.sql, row.id);
    } else await deps.blobs.reopenResumable(row.id, key).catch(() => deps.blobs.delete(key));
    throw err;
  }
  // An append was marked completed with its file (appendFiles). A crash before this line leaves a
  // new bundle's row at offset == length whose object is gone: recoverCompletion finds its bundle.
  if (row.bundle_id === null) await markCompleted(deps.sql, row.id, done.fileId, done.bundle.id);
  return done;
}

/**
 * A new bundle's upload at its full length whose row was never marked completed (a crash between
 * the bundle's commit and markCompleted): its bundle is the one holding the token derived from the
 * upload's id, with the upload's file first. Marks the row completed; null when no such bundle exists.
 */
export async function recoverCompletion(deps: Deps, row: TusRow): Promise<Completed | null> {
  if (row.completed_at !== null || row.new_bundle === null || row.upload_length !== row.upload_offset) return null;
  const token = deps.signer.tusUploadToken(row.id);
  const bundle = await findBundleByTokenHash(deps.sql, hashSecret(token));
  const [file] = bundle ? await listFiles(deps.sql, bundle.id) : [];
  if (!bundle || !file) return null;
  await markCompleted(deps.sql, row.id, file.id, bundle.id);
  return { bundle, fileId: file.id, uploadToken: token };
}

/** `row` as it reads once `done` has made it a file of its bundle. */
export const asCompleted = (row: TusRow, done: Completed): TusRow => ({ ...row, completed_at: new Date(), bundle_id: done.bundle.id, file_id: done.fileId });

/**
 * A plain upload at its full length that is not yet a file: its completion failed, was cut off with
 * its client, or is running. (A final upload is completed by its creation, which also spends its partials.)
 */
const completionPending = (row: TusRow): boolean =>
  row.completed_at === null && row.concat === null && row.upload_length !== null && row.upload_offset === row.upload_length;

/**
 * What every request that writes to an upload or completes it requires: the upload is live, and a
 * key it was started under is still active (a revoked key's upload must not become a bundle on its plan).
 */
export function refuseInactive(row: TusRow): void {
  if (row.is_expired) throw new AppError('UPLOAD_NOT_FOUND');
  if (row.api_key_id !== null && !row.key_active) throw new AppError('INVALID_API_KEY');
}

/**
 * How long a HEAD waits for a completion (reading a large object back from a bucket takes a while)
 * before it answers 423: the server answers a request still waiting 5-6 s after it arrived with
 * 503, which tus clients take for "start the upload again".
 */
const SETTLE_WAIT_MS = ANSWER_WAIT_MS - 3000;

const stillCompleting = (): AppError =>
  new AppError('UPLOAD_LOCKED', 'The upload is being completed; ask again in a moment', { headers: [['Retry-After', '1']] });
const notCompleted = (): AppError =>
  new AppError('UPLOAD_LOCKED', 'The upload could not be completed yet; ask again in a moment', { headers: [['Retry-After', '1']] });

/**
 * A tus client takes Upload-Offset == Upload-Length for success and asks nothing more, so a HEAD may
 * say so only of an upload that is a file. One whose completion is pending is completed under its
 * lock, or, while another request (its final PATCH) holds the lock, once that request lets go. A
 * completion that outlasts the wait is answered 423 through `late` at once and goes on, this request
 * in flight (shutdown waits for it) until it ends; a 5xx failure is answered 423 too (tus clients
 * start the upload over after a HEAD's 5xx). Returns the row as it then is.
 */
export async function settleCompletion(deps: Deps, row: TusRow, req: { gone(): boolean; late(err: AppError): void }): Promise<TusRow> {
  if (!completionPending(row)) return row;
  const until = Date.now() + SETTLE_WAIT_MS;
  for (let pause = 10; ; pause = Math.min(pause * 2, 250)) {
    const held = await holdUpload(deps.uploadLocks, row.id);
    if (held === undefined) throw new AppError('UPLOAD_NOT_FOUND');
    if (held !== 'locked') {
      if (completionPending(held.row)) return await awaitCompletion(deps, completeHeld(deps, held), until - Date.now(), req.late);
      await held.lock.release();
      return held.row;
    }
    if (req.gone() || Date.now() > until) throw stillCompleting();
    await delay(pause);
  }
}

/** Completes the pending upload `held` names, and lets its lock go whatever happens. */
async function completeHeld(deps: Deps, held: { lock: UploadLock; row: TusRow }): Promise<TusRow> {
  try {
    refuseInactive(held.row);
    return asCompleted(held.row, await completeUpload(deps, held.row));
  } finally {
    await held.lock.release();
  }
}

/**
 * `work`'s row within `ms`; else 423 through `late`, then waits it out. A 4xx refusal as it is; a
 * failure is logged (an unavailable store or scanner, a 503, as a warning) and answered 423.
 */
async function awaitCompletion(deps: Deps, work: Promise<TusRow>, ms: number, late: (err: AppError) => void): Promise<TusRow> {
  const failed = (err: unknown): void => {
    const status = err instanceof AppError ? err.status : 500;
    if (status === 503) deps.log.warn({ reason: (err as AppError).message }, 'tus upload not completed: unavailable');
    else if (status >= 500) deps.log.error({ err }, 'tus upload not completed');
  };
  let timer: NodeJS.Timeout | undefined;
  const timeUp = new Promise<null>((resolve) => (timer = setTimeout(resolve, Math.max(0, ms), null)));
  try {
    const row = await Promise.race([work, timeUp]);
    if (row) return row;
    late(stillCompleting());
    await work.catch(failed);
  } catch (err) {
    failed(err);
    if (err instanceof AppError && err.status < 500) throw err;
    throw notCompleted();
  } finally {
    clearTimeout(timer);
  }
  throw stillCompleting();
}

type Header = readonly [string, string];

/** What a completion tells its client: the bundle's link, the file and, for a bundle it made, the upload token. */
export function completionHeaders(bundle: { short_code: string; vanity: string | null }, fileId: number, uploadToken: string | null): Header[] {
  const out: Header[] = [['Sluice-Short-Code', bundle.short_code], ['Sluice-Share-Url', `/${bundle.short_code}`], ['Sluice-File-Id', String(fileId)]];
  if (uploadToken) out.push(['Sluice-Upload-Token', uploadToken]);
  if (bundle.vanity) out.push(['Sluice-Vanity-Url', `/${bundle.vanity}`]);
  return out;
}

/**
 * The same headers for an upload that finished earlier, to whoever holds its URL (HEAD, a final
 * request repeated), so a client that lost the completing answer still learns its link. None for a
 * partial, for an upload request's sender (who is told nothing of the bundle), or once the bundle is gone.
 */
export async function finishedHeaders(deps: Deps, row: TusRow): Promise<Header[]> {
  if (row.completed_at === null || row.concat === 'partial' || row.bundle_id === null || row.file_id === null) return [];
  const bundle = await answerOfBundle(deps.sql, row.bundle_id);
  if (!bundle || bundle.via_request) return [];
  // The token of a bundle this upload made is derived from the upload's id (it is stored only as a
  // hash); it is told only while it is still the bundle's token.
  const token = row.new_bundle !== null ? deps.signer.tusUploadToken(row.id) : null;
  return completionHeaders(bundle, row.file_id, token !== null && secretMatches(token, bundle.upload_token_hash) ? token : null);
}
