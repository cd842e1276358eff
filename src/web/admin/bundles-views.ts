// The console's bundles: the search (/admin/bundles) and one bundle's page (/admin/bundles/<code>).
import { html, humanSize, type Safe } from '../../util/html.ts';
import type { BundleListRow } from '../../db/admin-bundles.ts';
import type { OtherReport } from '../../db/admin-reports.ts';
import { at, bundleState, owner } from './bundle-views.ts';

export const SEARCH_KINDS = [
  ['any', 'Anything'],
  ['code', 'Short code'],
  ['vanity', 'Vanity name'],
  ['key', 'API key prefix'],
  ['sha256', 'SHA-256 of a file'],
] as const;

export type SearchKind = (typeof SEARCH_KINDS)[number][0];

/** The search form: a GET, so a search is a link. */
function searchForm(q: string, by: SearchKind): Safe {
  return html`<form method="get" action="/admin/bundles" class="row" role="search">
<input type="search" name="q" value="${q}" placeholder="Code, vanity name, key prefix (sk_…) or SHA-256" aria-label="Search bundles" maxlength="300">
<select name="by" aria-label="Search by">${SEARCH_KINDS.map(([k, name]) => html`<option value="${k}"${k === by ? html` selected` : null}>${name}</option>`)}</select>
<button class="btn" type="submit">Search</button>
</form>`;
}

function resultTable(rows: readonly BundleListRow[]): Safe {
  return html`<table class="grid">
<thead><tr><th>Code</th><th>Vanity</th><th>Created</th><th>Expires</th><th>Size</th><th>Files</th><th>Owner key</th><th>State</th></tr></thead>
<tbody>
${rows.map((b) => html`<tr><td><a class="mono" href="/admin/bundles/${b.short_code}">${b.short_code}</a></td><td>${b.vanity ?? ''}</td><td>${at(b.created_at)}</td><td>${at(b.expires_at)}</td><td>${humanSize(b.total_size_bytes)}</td><td>${b.file_count}</td><td>${owner(b.key_prefix)}</td><td>${bundleState(b)}</td></tr>\n`)}
</tbody></table>`;
}

export interface SearchView {
  readonly q: string;
  readonly by: SearchKind;
  /** What was searched, in words ("Bundles of key sk_…, newest first"); null when nothing was. */
  readonly described: string | null;
  /** Whether it searched by a file's SHA-256. */
  readonly byHash: boolean;
  /** Why the term was not searched; null when it was. */
  readonly problem: string | null;
  readonly rows: readonly BundleListRow[];
  readonly first: boolean;
  /** The first page of this search, and the next one (null on the last). */
  readonly firstHref: string;
  readonly nextHref: string | null;
}

export function searchBody(v: SearchView): Safe {
  const heading = v.problem
    ? html`<p class="error" role="alert">${v.problem}</p>`
    : html`<p class="meta">${v.described}${v.byHash ? ' (files without a recorded SHA-256 are not found)' : ''}.</p>`;
  return html`<section class="card">
<h1>Bundles</h1>
${searchForm(v.q, v.by)}
${heading}
${v.problem ? null : v.rows.length === 0 ? html`<p class="muted">${v.first ? 'No bundle found.' : 'No more bundles.'}</p>` : resultTable(v.rows)}
${v.first && v.nextHref === null
  ? null
  : html`<nav class="pager" aria-label="Pages">
${v.first ? null : html`<a class="btn" href="${v.firstHref}">First page</a>`}
${v.nextHref ? html`<a class="btn" href="${v.nextHref}" rel="next">Next page</a>` : null}
</nav>`}
</section>`;
}

/** A bundle's page: its section (bundle-views.ts) and the reports that name it. */
export function bundleBody(panel: Safe, code: string, reports: { total: number; rows: OtherReport[] }): Safe {
  return html`${panel}
<section class="card">
<h2>Reports</h2>
${reports.total === 0
  ? html`<p class="muted">No report names <span class="mono">${code}</span>.</p>`
  : html`<table class="grid"><thead><tr><th>#</th><th>Received</th><th>Reason</th><th>State</th></tr></thead><tbody>
${reports.rows.map((r) => html`<tr><td><a href="/admin/reports/${r.id}">${r.id}</a></td><td>${at(r.created_at)}</td><td>${r.reason}</td><td>${r.closed_at ? html`<span class="muted">closed ${at(r.closed_at)}</span>` : html`<strong>open</strong>`}</td></tr>\n`)}
</tbody></table>${reports.total > reports.rows.length ? html`<p class="muted">The newest ${reports.rows.length} of ${reports.total}.</p>` : null}`}
</section>`;
}

/** No bundle has this code. */
export const noBundleBody = (code: string): Safe =>
  html`<section class="card"><h1>No bundle <span class="mono">${code}</span></h1><p>It was deleted, or never existed. <a href="/admin/bundles">Search bundles</a></p></section>`;
