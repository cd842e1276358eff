import fsp from 'node:fs/promises';
import type { Deps } from '../routes/deps.ts';
import { appendFiles, type BundleRow, type NewFile } from '../db/bundles.ts';
import { hashSecret, newUploadToken } from '../auth/tokens.ts';
import { newFileKey } from '../storage/disk.ts';
import { DAY_MS } from '../util/time.ts';
import { markCompleted, type TusRow } from './store.ts';
import { settlePart } from './part-io.ts';
import { inspectTusPart } from '../abuse/tus-hook.ts';

export interface Completed {
  readonly bundle: BundleRow;
  readonly fileId: number;
  /** Only for a new bundle: its upload token, shown once. */
  readonly uploadToken: string | null;
}

/**
 * Turns a finished upload into a normal file of its bundle, exactly like the multipart path: the
 * fsynced part is renamed under a new storage key, then the rows are inserted (a new bundle, or an
 * append under the bundle's row lock). If the rows cannot be written the part is moved back, so
 * the upload stays complete-able (an empty PATCH at the final offset retries).
 */
export async function completeUpload(deps: Deps, row: TusRow, partPath: string): Promise<Completed> {
  // The file is exactly the bytes on record: none a crashed PATCH left past the last offset.
  await settlePart(partPath, row.upload_offset);
  // A hash worker reads the part in 1 MiB pieces, so the event loop only waits. Each PATCH had it
  // hash the durable bytes behind it (appendBody), so usually only the last piece is left; after a
  // restart, or on another process, it reads from 0.
  const d = await deps.disk.digest(partPath, row.id);
  if (d.size !== row.upload_offset) throw new Error(`tus part digested ${d.size} bytes, ${row.upload_offset} on record`);
  await inspectTusPart(deps, row.id, partPath);
  const key = newFileKey();
  const file: NewFile = { storageKey: key, name: row.file_name, size: d.size, mimeType: row.mime_type, crc32: d.crc32 };
  await deps.disk.commit(partPath, key);
  let done: Completed;
  try {
    if (row.bundle_id !== null) {
      const [f] = await appendFiles(deps.sql, row.bundle_id, [file], row.id);
      deps.bundles.invalidate(row.bundle_id);
      const [bundle] = await deps.sql<BundleRow[]>`select b.*, false as is_expired from bundles b where id = ${row.bundle_id}`;
      done = { bundle: bundle!, fileId: f!.id, uploadToken: null };
    } else {
      const nb = row.new_bundle!;
      const token = newUploadToken();
      const { bundle, files } = await deps.newBundles.insert(
        {
          uploadTokenHash: hashSecret(token),
          description: nb.description,
          accessPasswordHash: nb.accessPasswordHash,
          notifyEmail: nb.notifyEmail,
          isEncrypted: nb.isEncrypted,
          apiKeyId: row.api_key_id,
          maxSizeBytes: nb.maxSizeBytes,
          expiresAt: nb.expiryDays === null ? null : new Date(Date.now() + nb.expiryDays * DAY_MS),
        },
        [file],
      );
      done = { bundle, fileId: files[0]!.id, uploadToken: token };
    }
  } catch (err) {
    await fsp.rename(deps.disk.filePath(key), partPath).catch(() => deps.disk.remove(key));
    throw err;
  }
  // An append was marked completed with its file (appendFiles). A crash before this line leaves a
  // new bundle's row at offset == length whose part is gone: HEAD still answers, the completing
  // PATCH fails with 500 and the upload expires (the file itself is kept).
  if (row.bundle_id === null) await markCompleted(deps.sql, row.id, done.fileId, done.bundle.id);
  return done;
}
