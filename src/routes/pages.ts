import type { Ctx } from '../http/context.ts';
import type { Route } from '../http/server.ts';
import { sendError } from '../http/reply.ts';
import type { AppError } from '../errors.ts';
import { findBundleByTokenHash, listFiles } from '../db/bundles.ts';
import { hashSecret, secretMatches, UPLOAD_TOKEN_RE } from '../util/tokens.ts';
import { loadAssets } from '../web/assets.ts';
import { sendHtml } from '../web/html.ts';
import { managePage, notFoundPage, pageNumber, requestView, sharePage, slowDownPage, uploadPage, type View } from '../web/views.ts';
import { uploadOptionsFrom } from '../web/upload-options.ts';
import { unavailablePage } from '../web/report-views.ts';
import type { Deps } from '../deps.ts';
import { couldNameBundle, resolveCode } from '../bundles/vanity.ts';

/**
 * The web front end: upload page, share pages, manage pages and their static assets. Share and
 * manage pages are content paths, not /api/: they spend the content budget, not the API budget.
 * Registered last, so `/:code` shadows nothing.
 */
export function pageRoutes(deps: Deps): Route[] {
  const assets = loadAssets();
  // Links on a page (share link, QR code, og:url) name the origin the page was asked on.
  const viewOf = (ctx: Ctx): View => requestView(assets, deps.origin(ctx));
  const { anonMaxBundleBytes, anonExpiryDays } = deps.config;
  const notFound = (ctx: Ctx): void => sendHtml(ctx, 404, notFoundPage(viewOf(ctx)));
  const home = (ctx: Ctx): void =>
    sendHtml(ctx, 200, uploadPage(viewOf(ctx), anonMaxBundleBytes, anonExpiryDays, uploadOptionsFrom(ctx.query)));
  const share = (ctx: Ctx): Promise<void> => sharePageOf(ctx, deps, viewOf(ctx), notFound);
  const manage = (ctx: Ctx): Promise<void> => managePageOf(ctx, deps, viewOf(ctx), notFound);
  // A person reads these refusals: a page saying when to come back, not JSON.
  const renderError = (ctx: Ctx, err: AppError): void => {
    if (err.code === 'UNAVAILABLE_FOR_LEGAL_REASONS') return sendHtml(ctx, 451, unavailablePage(viewOf(ctx)), 'no-store');
    if (err.code !== 'RATE_LIMITED') return sendError(ctx, err);
    const retryAfter = Number(ctx.replyHeaders.find(([k]) => k === 'Retry-After')?.[1] ?? 60);
    sendHtml(ctx, 429, slowDownPage(viewOf(ctx), retryAfter), 'no-store');
  };
  const both = (pattern: string, handler: (ctx: Ctx) => void | Promise<void>, o: Partial<Route> = {}): Route[] => [
    { method: 'get', pattern, handler, renderError, ...o },
    { method: 'head', pattern, handler, renderError, ...o },
  ];
  // `/:code` answers every one-segment path, and browsers and bots ask for some on their own
  // (/favicon.ico, /robots.txt, /apple-touch-icon.png): only a path that could name a bundle is a miss.
  const couldBeBundle = (ctx: Ctx): boolean => couldNameBundle(ctx.params[0] ?? '');
  return [
    ...both('/static/:name', (ctx) => assets.serve(ctx)),
    ...both('/', home),
    ...both('/u/:token', manage, { content: true }),
    ...both('/:code', share, { content: true, isMiss: couldBeBundle }),
  ];
}

async function sharePageOf(ctx: Ctx, deps: Deps, view: View, notFound: (ctx: Ctx) => void): Promise<void> {
  // A short code, or a Premium bundle's vanity name.
  const code = await resolveCode(deps.sql, ctx.params[0] ?? '');
  if (code === undefined) return notFound(ctx);
  const bundle = await deps.bundles.get(code);
  if (!bundle) return notFound(ctx);
  // The password gate every content path asks; a browser can only pass it with ?t=<access token>.
  const caller = await deps.access.callerOf(ctx);
  const readable = deps.access.canRead(ctx, caller, bundle);
  const query = tokenQuery(ctx, bundle, readable);
  // An opened locked bundle lists private names and carries its token in every link: kept nowhere.
  const cache = readable && bundle.access_password_hash !== null ? 'no-store' : 'private, no-cache';
  const page = pageNumber(ctx.query.get('page'), bundle.files.length);
  // A client given a vanity link learns the code the API paths take (the password gate tells it too).
  ctx.replyHeaders.push(['Sluice-Short-Code', bundle.short_code]);
  sendHtml(ctx, 200, sharePage(view, bundle, readable ? bundle.files : null, query, page), cache);
  // Counted in memory and written in batches: a flood of views costs one statement per interval.
  if (ctx.method === 'get') deps.viewCounts?.add(bundle.id);
}

async function managePageOf(ctx: Ctx, deps: Deps, view: View, notFound: (ctx: Ctx) => void): Promise<void> {
  const token = ctx.params[0] ?? '';
  const upload = uploadOptionsFrom(ctx.query);
  if (!UPLOAD_TOKEN_RE.test(token)) return notFound(ctx);
  const bundle = await findBundleByTokenHash(deps.sql, hashSecret(token));
  if (!bundle || bundle.is_expired || !secretMatches(token, bundle.upload_token_hash)) return notFound(ctx);
  // The upload token adds and deletes files; listing them is content, behind the password gate.
  const caller = await deps.access.callerOf(ctx);
  const readable = deps.access.canRead(ctx, caller, bundle);
  const files = readable ? await listFiles(deps.sql, bundle.id) : null;
  const query = tokenQuery(ctx, bundle, readable);
  // The page embeds the upload token: never stored by caches.
  sendHtml(ctx, 200, managePage(view, bundle, files, token, bundle.max_size_bytes, upload, query), 'no-store');
}

/** `?t=<access token>` for the page's links when that token is what opened a locked bundle, else ''. */
function tokenQuery(ctx: Ctx, bundle: { access_password_hash: unknown }, readable: boolean): string {
  const token = ctx.query.get('t');
  return readable && bundle.access_password_hash !== null && token ? `?t=${encodeURIComponent(token)}` : '';
}
