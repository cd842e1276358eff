import type { Deps } from '../deps.ts';
import type { NewFile } from '../db/bundles.ts';
import type { BundleRow } from '../db/rows.ts';
import { createFromParts } from '../bundles/service.ts';
import { deleteUpload, markCompleted, type TusRow } from '../db/tus-uploads.ts';
import { appendToBundle } from '../bundles/requests.ts';
import { AppError } from '../errors.ts';

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
 * (an empty PATCH at the final offset retries).
 */
export async function completeUpload(deps: Deps, row: TusRow): Promise<Completed> {
  const { key, digest } = await deps.blobs.completeResumable(row.id, row.upload_offset).catch(async (err: unknown) => {
    // A refused file (malware, blocked content: see abuse/inspected-store.ts) is gone already; its
    // upload goes too, so nothing of it is kept and later requests to it answer 404.
    if (err instanceof AppError && err.status === 422) await deleteUpload(deps.sql, row.id);
    throw err;
  });
  const file: NewFile = {
    storageKey: key, name: row.file_name, size: digest.size, mimeType: row.mime_type, crc32: digest.crc32, sha256: digest.sha256,
  };
  let done: Completed;
  try {
    if (row.bundle_id !== null) {
      const { rows, bundle, viaRequest } = await appendToBundle(deps, row.bundle_id, [file], row.id);
      done = { bundle, fileId: rows[0]!.id, uploadToken: null, viaRequest };
    } else {
      const created = await createFromParts(deps, row.new_bundle!, row.api_key_id, [file]);
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
  // new bundle's row at offset == length whose object is gone: HEAD still answers, the completing
  // PATCH fails with 500 and the upload expires (the file itself is kept).
  if (row.bundle_id === null) await markCompleted(deps.sql, row.id, done.fileId, done.bundle.id);
  return done;
}
