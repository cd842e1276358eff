import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';
import { html, safe, type Safe } from '../util/html.ts';

/**
 * The headers of every HTML page. `formTargets`: origins a form on the page may end up at besides
 * our own; browsers apply form-action to the redirects that follow a submission too (the purchase
 * and portal forms are answered with a 303 to Stripe).
 */
export function securityHeaders(formTargets: readonly string[] = []): ReadonlyArray<readonly [string, string]> {
  return [
    [
      'Content-Security-Policy',
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; " +
        `form-action ${["'self'", ...formTargets].join(' ')}; base-uri 'none'; frame-ancestors 'none'`,
    ],
    ['X-Content-Type-Options', 'nosniff'],
    ['Referrer-Policy', 'no-referrer'],
    ['X-Frame-Options', 'DENY'],
  ];
}

export const SECURITY_HEADERS = securityHeaders();

/** Ends the request with an HTML page and the security headers. */
export function sendHtml(ctx: Ctx, status: number, page: Safe, cache = 'no-cache', formTargets: readonly string[] = []): void {
  send(ctx, status, page.__html, [
    ['Content-Type', 'text/html; charset=utf-8'],
    ['Cache-Control', cache],
    ...(formTargets.length > 0 ? securityHeaders(formTargets) : SECURITY_HEADERS),
  ]);
}

export interface LayoutOpts {
  title: string;
  body: Safe;
  /** Extra <head> markup (meta tags). */
  head?: Safe;
  /** Static asset names loaded as deferred scripts. */
  scripts?: readonly string[];
  /** Maps a static asset name to its versioned URL. */
  asset: (name: string) => string;
}

export function layout(o: LayoutOpts): Safe {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>${o.title}</title>
<link rel="stylesheet" href="${o.asset('app.css')}">
<link rel="icon" href="${o.asset('favicon.svg')}" type="image/svg+xml">
${o.head}
${(o.scripts ?? []).map((s) => html`<script src="${o.asset(s)}" defer></script>\n`)}
</head>
<body>
<header class="top"><a class="brand" href="/"><span class="logo" aria-hidden="true"></span>Sluice</a></header>
<main>
${o.body}
</main>
<footer class="foot">Files are shared by link and expire automatically.</footer>
</body>
</html>
`;
}
