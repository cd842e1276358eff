// The console's reports: the queue (/admin/reports) and one report beside its bundle (/admin/reports/<id>).
// Everything a reporter wrote is escaped by html`` and isolated with <bdi>, so it neither runs nor
// reorders the page around it.
import { html, type Safe } from '../../util/html.ts';
import type { OtherReport, ReportDetail, ReportListRow, ReportPage } from '../../db/admin-reports.ts';
import { csrfField } from './layout.ts';
import { at } from './bundle-views.ts';

/** Details longer than this are cut in the queue (the report's page shows them whole). */
const EXCERPT = 140;

const excerpt = (s: string | null): Safe | null =>
  s === null ? null : html`<bdi>${[...s].length > EXCERPT ? `${[...s].slice(0, EXCERPT).join('')}…` : s}</bdi>`;

function bundleCell(r: ReportListRow): Safe {
  const state = r.bundle === null ? html`<span class="muted">deleted</span>` : r.bundle === 'quarantined' ? html`<strong>quarantined</strong>` : r.bundle;
  return html`<a class="mono" href="/admin/bundles/${r.short_code}">${r.short_code}</a> ${state}`;
}

const stateOf = (closed: Date | null): Safe => (closed ? html`<span class="muted">closed ${at(closed)}</span>` : html`<strong>open</strong>`);

/** The queue: open reports first, oldest first, then closed ones, most recently closed first. */
export function reportQueueBody(p: ReportPage, o: { first: boolean; nextHref: string | null }): Safe {
  return html`<section class="card">
<h1>Reports</h1>
<p class="meta">Open reports first, oldest first; then closed ones, most recently closed first.</p>
${p.rows.length === 0
  ? html`<p class="muted">${o.first ? 'No reports.' : 'No more reports.'}</p>`
  : html`<table class="grid">
<thead><tr><th>#</th><th>Received</th><th>Reason</th><th>Bundle</th><th>Details</th><th>State</th></tr></thead>
<tbody>
${p.rows.map((r) => html`<tr><td><a href="/admin/reports/${r.id}">${r.id}</a></td><td>${at(r.created_at)}</td><td>${r.reason}</td><td>${bundleCell(r)}</td><td>${excerpt(r.details)}</td><td>${stateOf(r.closed_at)}</td></tr>\n`)}
</tbody></table>`}
${o.first && o.nextHref === null
  ? null
  : html`<nav class="pager" aria-label="Pages">
${o.first ? null : html`<a class="btn" href="/admin/reports">First page</a>`}
${o.nextHref ? html`<a class="btn" href="${o.nextHref}" rel="next">Next page</a>` : null}
</nav>`}
</section>`;
}

function reportFacts(r: ReportDetail): Safe {
  const rows: Array<[string, unknown]> = [
    ['Reason', r.reason],
    ['Details', r.details === null ? html`<span class="muted">none</span>` : html`<div class="desc"><bdi>${r.details}</bdi></div>`],
    ['Contact', r.contact === null ? html`<span class="muted">none</span>` : html`<bdi>${r.contact}</bdi>`],
    ['Reporter', html`<span class="mono">${r.reporter}</span> <span class="muted">(the same for reports from one address)</span>`],
    ['Received', at(r.created_at)],
    ['State', stateOf(r.closed_at)],
  ];
  return html`<table class="grid"><tbody>
${rows.map(([k, v]) => html`<tr><th scope="row">${k}</th><td>${v}</td></tr>\n`)}
</tbody></table>`;
}

function otherReports(code: string, others: { total: number; rows: OtherReport[] }): Safe {
  if (others.total === 0) return html`<p class="muted">No other report names <span class="mono">${code}</span>.</p>`;
  return html`<p>${others.total === 1 ? 'One other report names' : `${others.total} other reports name`} <span class="mono">${code}</span>${others.total > others.rows.length ? ` (the newest ${others.rows.length} here)` : ''}:</p>
<table class="grid"><thead><tr><th>#</th><th>Received</th><th>Reason</th><th>State</th></tr></thead><tbody>
${others.rows.map((o) => html`<tr><td><a href="/admin/reports/${o.id}">${o.id}</a></td><td>${at(o.created_at)}</td><td>${o.reason}</td><td>${stateOf(o.closed_at)}</td></tr>\n`)}
</tbody></table>`;
}

/**
 * One report, its actions and the other reports of its bundle; `bundle` is the bundle's section
 * (bundle-views.ts), or null when no bundle has the code any more. `newer`: the bundle that has the
 * code now was made after the report, so it is not the one reported (a deleted bundle's code was reused).
 */
export function reportBody(r: ReportDetail, o: { csrf: string; others: { total: number; rows: OtherReport[] }; bundle: Safe | null; newer: boolean }): Safe {
  return html`<section class="card">
<h1>Report ${r.id} <span class="muted">about</span> <span class="mono">${r.short_code}</span></h1>
${reportFacts(r)}
${r.closed_at === null
  ? html`<div class="actions"><form method="post" action="/admin/reports/${r.id}/close" class="inline">${csrfField(o.csrf)}<button class="btn" type="submit">Close report</button></form></div>`
  : null}
<h2>Other reports of this bundle</h2>
${otherReports(r.short_code, o.others)}
</section>
${o.bundle === null
  ? html`<section class="card"><p class="muted">No bundle has the code <span class="mono">${r.short_code}</span> now: it was deleted (or swept after it expired).</p></section>`
  : html`${o.newer ? html`<p class="error" role="alert">The bundle below was created after this report: the reported bundle is gone and its code was given to a new one.</p>` : null}${o.bundle}`}`;
}
