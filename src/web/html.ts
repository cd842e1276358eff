import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';

/** HTML that is already escaped (or trusted markup): interpolated as is. */
export interface Safe {
  readonly __html: string;
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Safe in text and in quoted attribute values. */
export const escapeHtml = (s: string): string => s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

/** Marks trusted markup: never pass user input here. */
export const safe = (markup: string): Safe => ({ __html: markup });

const isSafe = (v: unknown): v is Safe => typeof v === 'object' && v !== null && typeof (v as Safe).__html === 'string';

function render(v: unknown): string {
  if (v === null || v === undefined || v === false) return '';
  if (isSafe(v)) return v.__html;
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(String(v));
}

/** Tagged template: every interpolation is escaped unless it is Safe (arrays are rendered item by item). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Safe {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1]!;
  return safe(out);
}

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

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** 1536 → "1.5 KB" (powers of 1024, as the size caps are). */
export function humanSize(bytes: number): string {
  let n = bytes;
  let u = 0;
  while (n >= 1024 && u < UNITS.length - 1) {
    n /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${n < 10 ? n.toFixed(1).replace(/\.0$/, '') : Math.round(n)} ${UNITS[u]}`;
}

export const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;
