import { AppError } from '../errors.ts';
import type { Ctx } from './context.ts';

/**
 * Whether a browser sent this request from another site. Form posts (urlencoded, multipart,
 * text/plain) are "simple" requests: no CORS preflight guards them, so a hostile page can make a
 * visitor's browser post one with the visitor's address, e.g. ten wrong passwords that lock the
 * visitor out of a bundle for 15 minutes, or uploads of the page's choosing made from the visitor's
 * address, on the visitor's (or their whole NAT's) budget. Browsers say where a request comes from: Sec-Fetch-Site
 * (which page scripts cannot set), else Origin on every cross-origin POST. API clients (curl,
 * scripts) send neither and are not affected.
 *
 * Our own origin is BASE_URL's, or the one the request was addressed to (Host), so a server
 * reached by another name than BASE_URL still accepts its own pages' posts.
 */
export function fromOtherSite(headers: Readonly<Record<string, string | undefined>>, baseUrl: string): boolean {
  const site = headers['sec-fetch-site'];
  if (site === 'cross-site' || site === 'same-site') return true;
  if (site === 'same-origin' || site === 'none') return false;
  const origin = headers.origin;
  if (origin === undefined) return false;
  let from: URL;
  try {
    from = new URL(origin);
  } catch {
    return true; // "null" (a sandboxed frame, a file: page) or garbage: not one of our pages
  }
  return from.origin !== new URL(baseUrl).origin && from.host !== headers.host;
}

/** 403 CROSS_SITE for a browser's post from another site (see fromOtherSite). */
export function refuseOtherSite(ctx: Ctx, baseUrl: string): void {
  if (fromOtherSite(ctx.headers, baseUrl)) throw new AppError('CROSS_SITE');
}
