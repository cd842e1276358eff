// The operator console's frame: the site's layout with the console's navigation and a sign-out
// form. Every form of the console carries the session's CSRF token (csrfField).
import { layout } from '../html.ts';
import { html, type Safe } from '../../util/html.ts';

export const CONSOLE_PAGES = [
  ['overview', '/admin', 'Overview'],
  ['reports', '/admin/reports', 'Reports'],
  ['bundles', '/admin/bundles', 'Bundles'],
  ['keys', '/admin/keys', 'Keys'],
  ['blocklist', '/admin/blocklist', 'Blocklist'],
  ['audit', '/admin/audit', 'Audit trail'],
] as const;

export type ConsolePage = (typeof CONSOLE_PAGES)[number][0];

export const csrfField = (csrf: string): Safe => html`<input type="hidden" name="csrf" value="${csrf}">`;

export interface ConsoleFrame {
  readonly asset: (name: string) => string;
  readonly title: string;
  readonly active: ConsolePage | null;
  readonly label: string;
  readonly csrf: string;
  readonly body: Safe;
  /** A line saying what the last action did (after its redirect). */
  readonly notice?: string | null;
  readonly scripts?: readonly string[];
  /** Static asset names of stylesheets the page needs beside app.css (a library's). */
  readonly styles?: readonly string[];
}

export function consolePage(f: ConsoleFrame): Safe {
  const body = html`<nav class="console-nav" aria-label="Console">
${CONSOLE_PAGES.map(([id, href, name]) => html`<a href="${href}"${id === f.active ? html` aria-current="page"` : null}>${name}</a>`)}
<form method="post" action="/admin/logout" class="console-out">${csrfField(f.csrf)}<span class="muted">${f.label}</span> <button class="btn" type="submit">Sign out</button></form>
</nav>
${f.notice ? html`<p class="notice" role="status">${f.notice}</p>` : null}
${f.body}`;
  return layout({
    title: `${f.title} · Sluice console`,
    body,
    head: html`<meta name="robots" content="noindex, nofollow">
${(f.styles ?? []).map((s) => html`<link rel="stylesheet" href="${f.asset(s)}">\n`)}`,
    scripts: f.scripts,
    asset: f.asset,
  });
}

/** The page a sign-in link opens: one button, so a link preview that fetches the URL uses nothing. */
export function signInPage(asset: (name: string) => string, label: string): Safe {
  const body = html`<section class="card center">
<h1>Sluice console</h1>
<p class="lead">Sign in as <strong>${label}</strong> for 12 hours on this browser.</p>
<form method="post"><button class="btn primary" type="submit">Sign in</button></form>
</section>`;
  return layout({ title: 'Sign in · Sluice console', body, head: html`<meta name="robots" content="noindex, nofollow">`, asset });
}
