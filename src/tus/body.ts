import type { Deps } from '../routes/deps.ts';
import type { Ctx } from '../http/context.ts';
import { closePart, openPart, type BodyTap } from './patch.ts';
import { completeUpload } from './complete.ts';
import { setProgress, type TusRow } from './store.ts';
import { httpDate, TusError, type Checksum } from './protocol.ts';

/** True when the request announces body bytes (a positive Content-Length, or chunked). */
export function hasBody(headers: Readonly<Record<string, string>>): boolean {
  const cl = headers['content-length'];
  if (cl !== undefined) return Number(cl) > 0;
  return /chunked/i.test(headers['transfer-encoding'] ?? '');
}

/**
 * Appends this request's body at `row.upload_offset`, then records the new offset — only after
 * the bytes are on disk, so a HEAD after any break reports bytes the server really holds. With a
 * checksum, the body counts only when complete and matching (else the part is cut back, 460).
 * At the final offset the upload is completed into its bundle. Returns the reply headers.
 */
export async function appendBody(
  ctx: Ctx,
  deps: Deps,
  tap: BodyTap | null,
  row: TusRow,
  partPath: string,
  checksum: Checksum | null,
): Promise<Array<readonly [string, string]>> {
  const start = row.upload_offset;
  const length = row.upload_length;
  let offset = start;
  if (tap) {
    const fd = await openPart(partPath);
    let cut: number | null = null;
    let failure: Error | null = null;
    try {
      const r = await tap.pipe(fd, start, length ?? row.max_bytes, checksum?.algorithm ?? null);
      failure = r.error;
      if (checksum && !(r.complete && r.digest?.equals(checksum.digest))) {
        cut = start;
        if (r.complete) failure = new TusError(460, 'CHECKSUM_MISMATCH', 'Upload-Checksum does not match the body');
      } else offset = start + r.written;
    } finally {
      // The fsync makes the written bytes and the size durable before the offset is recorded.
      await closePart(fd, cut);
    }
    if (offset !== start || length !== null) await setProgress(deps.sql, row.id, offset, length);
    // Bytes below a recorded offset never change: the hash worker can take them now, overlapping
    // the next PATCH instead of re-reading the whole part at completion.
    if (offset !== start && (length === null || offset < length)) deps.disk.digestAhead(row.id, partPath, offset);
    if (failure) throw failure;
    if (ctx.aborted) return [];
  } else if (length !== null) await setProgress(deps.sql, row.id, offset, length);

  const headers: Array<readonly [string, string]> = [
    ['Upload-Offset', String(offset)],
    ['Upload-Expires', httpDate(row.expires_at)],
  ];
  if (length !== null && offset === length) {
    const done = await completeUpload(deps, { ...row, upload_offset: offset }, partPath);
    headers.push(['Sluice-Short-Code', done.bundle.short_code], ['Sluice-Share-Url', `/${done.bundle.short_code}`]);
    headers.push(['Sluice-File-Id', String(done.fileId)]);
    if (done.uploadToken) headers.push(['Sluice-Upload-Token', done.uploadToken]);
  }
  return headers;
}
