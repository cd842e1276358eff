// The console's blocklist page: a form to block a SHA-256, and the blocked hashes with a remove button.
import { html, type Safe } from '../../util/html.ts';
import type { BlockedListRow, Page } from '../../db/admin-lists.ts';
import { csrfField } from './layout.ts';
import { pager, problem, when } from './list-views.ts';

export interface BlocklistView {
  readonly csrf: string;
  readonly list: Page<BlockedListRow>;
  readonly later: boolean;
  /** A refused block: why, and the fields as they were sent. */
  readonly error?: string;
  readonly form?: { sha256?: string; reason?: string };
}

export function blocklistBody(v: BlocklistView): Safe {
  return html`<section class="card">
<h1>Blocklist</h1>
<p class="muted">An upload of a blocked file is refused (422) and nothing of it is kept. Blocking a hash quarantines the bundles that already hold it; files stored before anything was blocked are hashed by the sweeper, a few at a time, and their bundles quarantined as they are found.</p>
${addForm(v.csrf, v.form ?? {}, v.error)}
<h2>Blocked hashes</h2>
${v.list.rows.length === 0 ? html`<p class="muted">Nothing${v.later ? ' older' : ''} is blocked.</p>` : table(v.csrf, v.list.rows)}
${pager('/admin/blocklist', { next: v.list.next, later: v.later })}
</section>`;
}

function addForm(csrf: string, f: { sha256?: string; reason?: string }, error: string | undefined): Safe {
  return html`<h2>Block a file</h2>
${problem(error)}
<form method="post" action="/admin/blocklist/add">${csrfField(csrf)}
<label class="field-label" for="b-sha">SHA-256 (64 hex digits)</label>
<input id="b-sha" class="mono" name="sha256" type="text" required pattern="\\s*[0-9A-Fa-f]{64}\\s*" maxlength="80" autocomplete="off" spellcheck="false" value="${f.sha256 ?? ''}">
<label class="field-label" for="b-reason">Reason (optional)</label>
<input id="b-reason" name="reason" type="text" maxlength="500" value="${f.reason ?? ''}">
<div class="actions"><button class="btn danger" type="submit">Block</button></div>
</form>`;
}

function table(csrf: string, rows: readonly BlockedListRow[]): Safe {
  return html`<table class="grid">
<thead><tr><th>SHA-256</th><th>Reason</th><th>Blocked</th><th>By</th><th></th></tr></thead>
<tbody>
${rows.map(
  (b) => html`<tr>
<td class="mono">${b.hex}</td><td>${b.reason ?? ''}</td><td>${when(b.created_at)}</td><td>${b.created_by}</td>
<td><form class="inline" method="post" action="/admin/blocklist/remove">${csrfField(csrf)}<input type="hidden" name="sha256" value="${b.hex}"><button class="btn" type="submit">Remove</button></form></td>
</tr>`,
)}
</tbody>
</table>`;
}
