import type { Deps } from '../routes/deps.ts';
import type { Ctx } from '../http/context.ts';
import type { BodyTap, HashFeed } from './patch.ts';
import { closePart, openPart } from './part-io.ts';
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
    const fds = await openPart(partPath, start);
    let cut: number | null = null;
    let failure: Error | null = null;
    /** The offset on record once this PATCH is over: what the hash worker may keep of its bytes. */
    let recorded = start;
    try {
      try {
        // A partial upload is never digested itself (its final upload digests the joined file).
        const partial = row.concat === 'partial';
        const feed: HashFeed | null = partial ? null : (at, buf, len, back) => deps.disk.feedAhead(row.id, at, buf, len, back);
        const r = await tap.pipe(fds.fd, start, length ?? row.max_bytes, checksum?.algorithm ?? null, fds.directFd, feed);
        failure = r.error;
        if (checksum && !(r.complete && r.digest?.equals(checksum.digest))) {
          cut = start;
          if (r.complete) failure = new TusError(460, 'CHECKSUM_MISMATCH', 'Upload-Checksum does not match the body');
        } else offset = start + r.written;
      } finally {
        // The fsync makes the written bytes and the size durable before the offset is recorded. Bytes
        // issued past a failed write or sync are cut off: they were never acknowledged.
        await closePart(fds, cut ?? offset);
      }
      if (offset !== start || length !== null) await setProgress(deps.sql, row.id, offset, length);
      recorded = offset;
    } finally {
      // The hash worker took this PATCH's bytes from memory as they were written (feed). Naming the
      // offset on record settles them, whatever failed: a state that went past it (a failed write or
      // sync, a cut, an offset never recorded) starts over, one short of it reads the rest from the
      // part. At the final offset every byte was written and fed; completion's digest goes on from there.
      if ((length === null || recorded < length) && row.concat !== 'partial') deps.disk.digestAhead(row.id, partPath, recorded);
    }
    if (failure) throw failure;
    if (ctx.aborted) return [];
  } else if (length !== null) await setProgress(deps.sql, row.id, offset, length);

  const headers: Array<readonly [string, string]> = [
    ['Upload-Offset', String(offset)],
    ['Upload-Expires', httpDate(row.expires_at)],
  ];
  // A partial upload stays a piece until a final upload joins it (concat.ts).
  if (length !== null && offset === length && row.concat !== 'partial') {
    const done = await completeUpload(deps, { ...row, upload_offset: offset }, partPath);
    if (done.viaRequest) return headers; // an upload request's sender learns nothing of the bundle
    headers.push(['Sluice-Short-Code', done.bundle.short_code], ['Sluice-Share-Url', `/${done.bundle.short_code}`]);
    headers.push(['Sluice-File-Id', String(done.fileId)]);
    if (done.uploadToken) headers.push(['Sluice-Upload-Token', done.uploadToken]);
    if (done.bundle.vanity) headers.push(['Sluice-Vanity-Url', `/${done.bundle.vanity}`]);
  }
  return headers;
}
