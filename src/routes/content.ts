import type { Ctx } from '../http/context.ts';
import { etagMatches, send, sendHeaders } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { AppError } from '../errors.ts';
import { findActiveBundle } from '../db/bundles.ts';
import { findDownloadableFile } from '../db/files.ts';
import { SHORT_CODE_RE } from '../util/tokens.ts';
import { createLimiter } from '../util/limit.ts';
import { hasPreview } from '../thumbs/previewable.ts';
import { createPreviews, MAX_INPUT_PIXELS, PREVIEW_MEMORY_BYTES, type Previews } from '../thumbs/preview.ts';
import { CARD_H, CARD_W, cardFields, createOgCards, type OgCards } from '../thumbs/og-card.ts';
import { createRenderer } from '../thumbs/render-process.ts';
import { fileTag, parseFileId, sendStoredFile } from './download.ts';
import type { Deps } from '../deps.ts';

/** Version prefix of thumbnail ETags: bump when the thumbnail recipe changes. */
const THUMB_ETAG = 't1';

/**
 * Web content paths (not under /api/: the content budget instead of the API budget; the password
 * gate still applies):
 *   GET|HEAD /d/<id>            the download, exactly as /api/v1/download/<id>
 *   GET|HEAD /d/<id>?preview=1  a small WebP thumbnail of an image; a signed thumbnail_url opens only this
 *   GET|HEAD /og/<code>.png     the bundle's share card (link previews), without file names
 */
export function contentRoutes(deps: Deps): Route[] {
  // Images are decoded in a render process of its own, started on the first image request: a
  // server that never renders one does not carry libvips. One preview render at a time, each within
  // PREVIEW_MEMORY_BYTES. Share cards are small and drawn from our own SVG: they have a slot of their
  // own and do not wait behind a large photo.
  const renderer = createRenderer({
    log: deps.log,
    budgetBytes: PREVIEW_MEMORY_BYTES,
    maxPixels: MAX_INPUT_PIXELS,
    cardPixels: CARD_W * CARD_H * 4,
    onRefused: (reason) => deps.metrics?.previewRefused(reason),
  });
  const previews = createPreviews({ renderer, limiter: createLimiter({ max: 1, queue: 32 }), log: deps.log, blobs: deps.blobs });
  const cards = createOgCards({ renderer, limiter: createLimiter({ max: 1, queue: 32 }), cache: deps.blobs.cache, log: deps.log });
  const file = (ctx: Ctx): Promise<void> => fileOrPreview(ctx, deps, previews);
  const og = (ctx: Ctx): Promise<void> => ogCard(ctx, deps, cards);
  return [
    { method: 'get', pattern: '/d/:id', transfer: 'download', content: true, handler: file },
    { method: 'head', pattern: '/d/:id', content: true, handler: file },
    { method: 'get', pattern: '/og/:code', content: true, handler: og },
    { method: 'head', pattern: '/og/:code', content: true, handler: og },
  ];
}

async function fileOrPreview(ctx: Ctx, deps: Deps, previews: Previews): Promise<void> {
  const id = parseFileId(ctx.params[0]);
  if (id === null) throw new AppError('FILE_NOT_FOUND');
  // Read while `req` data is at hand; the context already copied the query.
  const wantsPreview = ctx.query.get('preview') === '1';
  const exp = ctx.query.get('exp');
  const sig = ctx.query.get('sig');
  const file = await findDownloadableFile(deps.sql, id);
  if (!file) throw new AppError('FILE_NOT_FOUND');
  const caller = await deps.access.callerOf(ctx);
  const readable = deps.access.canRead(ctx, caller, { ...file, id: file.bundle_id });
  if (!wantsPreview) {
    // A preview signature opens the preview only, never the file itself.
    if (!readable) throw new AppError('FILE_NOT_FOUND');
    await sendStoredFile(ctx, deps, file);
    return;
  }
  if (!readable && !deps.signer.verifyPreview(file.id, exp, sig)) throw new AppError('FILE_NOT_FOUND');
  // (the content itself is sniffed again before decoding)
  if (!hasPreview(file.mime_type, { encrypted: file.is_encrypted, maxDownloads: file.max_downloads })) throw new AppError('FILE_NOT_FOUND');
  const etag = `"${THUMB_ETAG}-${fileTag(file)}"`;
  const headers: Array<[string, string]> = [
    ['ETag', etag],
    ['Cache-Control', 'private, max-age=3600'],
    ['X-Content-Type-Options', 'nosniff'],
  ];
  if (etagMatches(ctx.headers['if-none-match'], etag)) return sendHeaders(ctx, 304, headers, null);
  const bytes = await previews.thumbnail(file.storage_key);
  if (!bytes) throw new AppError('FILE_NOT_FOUND');
  send(ctx, 200, bytes, [['Content-Type', 'image/webp'], ...headers]);
}

async function ogCard(ctx: Ctx, deps: Deps, cards: OgCards): Promise<void> {
  const m = /^([a-zA-Z0-9]+)\.png$/.exec(ctx.params[0] ?? '');
  const code = m?.[1] ?? '';
  if (!SHORT_CODE_RE.test(code)) throw new AppError('BUNDLE_NOT_FOUND');
  const bundle = await findActiveBundle(deps.sql, code);
  if (!bundle) throw new AppError('BUNDLE_NOT_FOUND');
  const caller = await deps.access.callerOf(ctx);
  if (!deps.access.canRead(ctx, caller, bundle)) throw new AppError('BUNDLE_NOT_FOUND');
  const { bytes, etag } = await cards.card(bundle.short_code, cardFields(bundle, Date.now()));
  // A locked bundle's card was opened with a credential: shared caches must not keep it.
  const cache = bundle.access_password_hash === null ? 'public, max-age=300' : 'private, max-age=300';
  const headers: Array<[string, string]> = [
    ['ETag', etag],
    ['Cache-Control', cache],
    ['X-Content-Type-Options', 'nosniff'],
  ];
  if (etagMatches(ctx.headers['if-none-match'], etag)) return sendHeaders(ctx, 304, headers, null);
  send(ctx, 200, bytes, [['Content-Type', 'image/png'], ...headers]);
}
