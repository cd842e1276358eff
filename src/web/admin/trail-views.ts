// The console's audit trail: operator actions, newest first, with a filter by action or operator.
import { html, type Safe } from '../../util/html.ts';
import type { AuditRow } from '../../db/abuse.ts';
import type { Page } from '../../db/admin-lists.ts';
import { pager, when } from './list-views.ts';

/** The actions the CLI and the console record: suggestions for the filter, which takes any text. */
const KNOWN_ACTIONS = [
  'keys create', 'keys revoke', 'block add', 'block remove', 'bundles expire', 'bundles delete',
  'bundles quarantine', 'bundles release', 'reports close',
];

export interface TrailView {
  readonly list: Page<AuditRow>;
  readonly later: boolean;
  readonly action: string | null;
  readonly operator: string | null;
}

export function trailBody(v: TrailView): Safe {
  const keep: Record<string, string> = {};
  if (v.action !== null) keep.action = v.action;
  if (v.operator !== null) keep.operator = v.operator;
  const filtered = v.action !== null || v.operator !== null;
  return html`<section class="card">
<h1>Audit trail</h1>
<form method="get" action="/admin/audit" class="inline">
<label for="a-action">Action</label> <input id="a-action" name="action" type="text" list="a-actions" value="${v.action ?? ''}">
<datalist id="a-actions">${KNOWN_ACTIONS.map((a) => html`<option value="${a}">`)}</datalist>
<label for="a-operator">Operator</label> <input id="a-operator" name="operator" type="text" value="${v.operator ?? ''}">
<button class="btn" type="submit">Filter</button>
${filtered ? html`<a href="/admin/audit">Show all</a>` : null}
</form>
${v.list.rows.length === 0 ? html`<p class="muted">No ${v.later ? 'older ' : ''}records${filtered ? ' match' : ''}.</p>` : table(v.list.rows)}
${pager('/admin/audit', { keep, next: v.list.next, later: v.later })}
</section>`;
}

function table(rows: readonly AuditRow[]): Safe {
  return html`<table class="grid">
<thead><tr><th>When (UTC)</th><th>Action</th><th>Target</th><th>Operator</th><th>Detail</th></tr></thead>
<tbody>
${rows.map(
  (a) => html`<tr><td>${when(a.at)}</td><td>${a.action}</td><td class="mono">${a.target}</td><td>${a.operator}</td><td>${a.detail ?? ''}</td></tr>`,
)}
</tbody>
</table>`;
}
