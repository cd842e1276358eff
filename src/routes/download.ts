import type { Ctx } from '../http/context.ts';
import { etagMatches, preconditionsHold, sendError, sendHeaders } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { contentDisposition, parseRange } from '../http/range.ts';
import { streamFile } from '../http/body-out.ts';
import { isBlobError, AppError } from '../errors.ts';
import type { FileRow } from '../db/rows.ts';
import { findDownloadableFile, type DownloadRow } from '../db/files.ts';
import type { Deps } from '../deps.ts';
import { limitedResponse } from '../bundles/limits.ts';

export function downloadRoutes(deps: Deps): Route[] {
  const handler = (ctx: Ctx): Promise<void> => download(ctx, deps);
  return [
    { method: 'get', pattern: '/api/v1/download/:id', transfer: 'download', handler },
    { method: 'head', pattern: '/api/v1/download/:id', handler },
  ];
}

/** Parses a file id path segment: a positive integer, else null (the API answers 400 INVALID_FILE_ID). */
export function parseFileId(raw: string | undefined): number | null {
  if (raw === undefined || !/^[1-9]\d{0,15}$/.test(raw)) return null;
  const n = Number(raw);
  return Number.isSafeInteger(n) ? n : null;
}

async function download(ctx: Ctx, deps: Deps): Promise<void> {
  const id = parseFileId(ctx.params[0]);
  if (id === null) throw new AppError('INVALID_FILE_ID');
  const file = await findDownloadableFile(deps.sql, id);
  if (!file) throw new AppError('FILE_NOT_FOUND');
  // Hidden, not forbidden: a locked file is indistinguishable from a missing one.
  const caller = await deps.access.callerOf(ctx);
  if (!deps.access.canRead(ctx, caller, { ...file, id: file.bundle_id })) throw new AppError('FILE_NOT_FOUND');
  await sendStoredFile(ctx, deps, file);
}

/**
 * The strong validator of a stored file's bytes, without a content hash: a file never changes
 * after its row is committed, so its id names its bytes. The creation time, size and CRC-32 keep
 * a tag from matching another file's should ids restart (a database rebuilt behind the same host).
 */
export function fileTag(file: Pick<FileRow, 'id' | 'created_at' | 'size' | 'crc32'>): string {
  const crc = (file.crc32 >>> 0).toString(16).padStart(8, '0');
  return `${file.id.toString(36)}-${file.created_at.getTime().toString(36)}-${file.size.toString(36)}-${crc}`;
}

/** Sends a stored file with the full HTTP caching and Range semantics; counts completed downloads. */
export async function sendStoredFile(ctx: Ctx, deps: Deps, file: DownloadRow): Promise<void> {
  const etag = `"${fileTag(file)}"`;
  const lastModified = file.created_at.toUTCString();
  const common: Array<[string, string]> = [
    ['ETag', etag],
    ['Last-Modified', lastModified],
    ['Accept-Ranges', 'bytes'],
    ['Cache-Control', 'private, no-cache'],
    ['X-Content-Type-Options', 'nosniff'],
  ];
  const h = ctx.headers;
  if (!preconditionsHold(h, etag, file.created_at)) return sendError(ctx, new AppError('PRECONDITION_FAILED'), false, common);
  if (notModified(h['if-none-match'], h['if-modified-since'], etag, file.created_at)) {
    return sendHeaders(ctx, 304, common, null);
  }
  const ifRange = h['if-range'];
  const rangeAllowed = ifRange === undefined || ifRange === etag || ifRange === lastModified;
  const range = parseRange(rangeAllowed ? h.range : undefined, file.size);
  if (range.kind === 'unsatisfiable') {
    return sendError(ctx, new AppError('INVALID_RANGE'), false, [...common, ['Content-Range', `bytes */${file.size}`]]);
  }
  const [status, start, length] =
    range.kind === 'partial' ? [206, range.start, range.end - range.start + 1] : [200, 0, file.size];
  const headers: Array<[string, string]> = [
    ['Content-Type', file.mime_type],
    ['Content-Disposition', contentDisposition(file.name)],
    ['Content-Security-Policy', "sandbox; default-src 'none'"],
    ...common,
  ];
  if (status === 206) headers.push(['Content-Range', `bytes ${start}-${start + length - 1}/${file.size}`]);
  if (ctx.method === 'head') return sendHeaders(ctx, status, headers, length);
  // A limited bundle: this client's download of the file is taken before the first byte.
  const limited = file.max_downloads === null ? null : await limitedResponse(deps, ctx, file.bundle_id, [{ fileId: file.id, from: start, to: start + length }]);
  let complete: boolean;
  try {
    complete = await streamFile(ctx, deps.blobs, file.storage_key, file.size, status, headers, start, length, limited?.wrap(length));
  } catch (err) {
    // Deleted between the row lookup and the open: it is simply gone.
    if (isBlobError(err, 'NOT_FOUND')) throw new AppError('FILE_NOT_FOUND');
    throw err;
  } finally {
    await limited?.credit([{ fileId: file.id, from: start, to: start + Math.min(ctx.bytesOut, length) }]);
  }
  if (complete && start + length === file.size) {
    deps.downloadCounts?.add(file.id);
    void deps.downloads?.downloaded(file.bundle_id, file.notify_email, file.name);
  }
}

function notModified(inm: string | undefined, ims: string | undefined, etag: string, modified: Date): boolean {
  if (inm !== undefined) return etagMatches(inm, etag);
  if (ims === undefined) return false;
  const since = Date.parse(ims);
  return Number.isFinite(since) && Math.floor(modified.getTime() / 1000) <= Math.floor(since / 1000);
}
