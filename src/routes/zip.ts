import { createHash } from 'node:crypto';
import type { Ctx } from '../http/context.ts';
import { etagMatches, preconditionsHold, sendError, sendHeaders } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { contentDisposition, parseRange } from '../http/range.ts';
import { AppError, isBlobError } from '../errors.ts';
import { findActiveBundle } from '../db/bundles.ts';
import { type FileRow } from '../db/rows.ts';
import { createZipPlans, type ZipPlans } from '../zip/plan.ts';
import { sendZipRange } from '../zip/stream.ts';
import type { Deps } from '../deps.ts';
import { resolveCode } from '../bundles/vanity.ts';
import { limitedResponse, zipPieces } from '../bundles/limits.ts';

/** Bumped whenever the archive bytes for the same files would change (layout, naming rules). */
const FORMAT_VERSION = 'z1';

/**
 * GET|HEAD /zip/<code>: the whole bundle as one STORED ZIP. The archive is a pure function of the
 * file rows, so its size is known before the first byte and any byte range can be served: a broken
 * multi-gigabyte download resumes with Range + If-Range. A web content path: not under /api/, so it
 * spends the content budget, not the API budget; the password gate still applies (hidden bundles are 404).
 */
export function zipRoutes(deps: Deps): Route[] {
  const plans = createZipPlans({ sql: deps.sql, etag: zipEtag, keyOf: (f) => f.storage_key });
  const handler = (ctx: Ctx): Promise<void> => sendZip(ctx, deps, plans);
  return [
    { method: 'get', pattern: '/zip/:code', transfer: 'download', content: true, handler },
    { method: 'head', pattern: '/zip/:code', content: true, handler },
  ];
}

/** Strong validator of the archive bytes: everything they derive from, fed file by file in id order. */
export function zipEtag(): { add(f: FileRow): void; digest(): string } {
  const h = createHash('sha256').update(FORMAT_VERSION);
  return {
    add: (f) => void h.update(JSON.stringify([f.id, f.size, f.crc32, f.created_at.getTime(), f.name])),
    digest: () => `"${FORMAT_VERSION}-${h.digest('hex').slice(0, 40)}"`,
  };
}

/**
 * A file is opened only when the archive reaches it. One gone before the first byte (deleted between
 * the listing and the open) is answered by listing again once, so the archive leaves it out; still
 * gone then (a row whose file is missing), the answer is 404, as for /d/<id>. One deleted after the
 * headers went out ends the response early: the archive it promised no longer exists, and its new
 * ETag stops a resume with the old one.
 */
async function sendZip(ctx: Ctx, deps: Deps, plans: ZipPlans, listedAgain = false): Promise<void> {
  // A short code, or a Premium bundle's vanity name.
  const code = await resolveCode(deps.sql, ctx.params[0] ?? '');
  if (code === undefined) throw new AppError('BUNDLE_NOT_FOUND');
  const bundle = await findActiveBundle(deps.sql, code);
  if (!bundle) throw new AppError('BUNDLE_NOT_FOUND');
  const caller = await deps.access.callerOf(ctx);
  if (!deps.access.canRead(ctx, caller, bundle)) throw new AppError('BUNDLE_NOT_FOUND');

  const { files, keys, layout, etag } = await plans.plan(bundle.id); // id order: stable names and layout
  const common: Array<[string, string]> = [
    ['ETag', etag],
    ['Accept-Ranges', 'bytes'],
    ['Cache-Control', 'private, no-cache'],
    ['X-Content-Type-Options', 'nosniff'],
  ];
  const h = ctx.headers;
  // (no modification date: If-Unmodified-Since is ignored; If-Match guards a resume)
  if (!preconditionsHold(h, etag)) return sendError(ctx, new AppError('PRECONDITION_FAILED'), false, common);
  if (etagMatches(h['if-none-match'], etag)) return sendHeaders(ctx, 304, common, null);
  // No Last-Modified: deleting a file changes the archive without a newer date, so only the ETag validates.
  const ifRange = h['if-range'];
  const range = parseRange(ifRange === undefined || ifRange === etag ? h.range : undefined, layout.size);
  if (range.kind === 'unsatisfiable') {
    return sendError(ctx, new AppError('INVALID_RANGE'), false, [...common, ['Content-Range', `bytes */${layout.size}`]]);
  }
  const [status, start, length] =
    range.kind === 'partial' ? [206, range.start, range.end - range.start + 1] : [200, 0, layout.size];
  const headers: Array<[string, string]> = [
    ['Content-Type', 'application/zip'],
    ['Content-Disposition', contentDisposition(`${bundle.short_code}.zip`)],
    ...common,
  ];
  if (status === 206) headers.push(['Content-Range', `bytes ${start}-${start + length - 1}/${layout.size}`]);
  if (ctx.method === 'head') {
    sendHeaders(ctx, status, headers, length);
    return;
  }
  // A limited bundle: this client's download of every file the range reaches is taken first.
  const reached = bundle.max_downloads === null ? [] : zipPieces(layout, files, start, start + length);
  const limited = reached.length === 0 ? null : await limitedResponse(deps, ctx, bundle.id, reached);
  let complete: boolean;
  try {
    complete = await sendZipRange(ctx, deps.blobs, layout, keys, status, headers, start, length, limited?.wrap(length));
  } catch (err) {
    // (nothing was sent: the retry takes the sessions again)
    await limited?.credit([]);
    // (streamBody rejects only before the first byte: nothing was sent yet)
    if (!isBlobError(err, 'NOT_FOUND') || ctx.aborted) throw err;
    if (!listedAgain) return sendZip(ctx, deps, plans, true);
    throw new AppError('FILE_NOT_FOUND');
  }
  await limited?.credit(zipPieces(layout, files, start, start + Math.min(ctx.bytesOut, length)));
  if (complete && start + length === layout.size) void deps.downloads?.downloaded(bundle.id, bundle.notify_email, `${bundle.short_code}.zip`, files.length);
}
