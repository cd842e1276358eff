// The console's keys page: the keys as `sluice keys list` shows them, a form to mint one, a revoke
// button per key, and the page that shows a new key its only time.
import { html, type Safe } from '../../util/html.ts';
import { PLANS } from '../../plans.ts';
import type { KeyListRow, Page } from '../../db/admin-lists.ts';
import type { KeyFields } from '../../auth/key-request.ts';
import { csrfField } from './layout.ts';
import { pager, problem, when } from './list-views.ts';

export interface KeysView {
  readonly csrf: string;
  /** A fresh name for this rendering of the mint form (see sql/0027_key_mint_forms.sql). */
  readonly formId: string;
  readonly list: Page<KeyListRow>;
  /** This is a later page (not the newest). */
  readonly later: boolean;
  /** A refused mint: why, and the fields as they were sent. */
  readonly error?: string;
  readonly form?: KeyFields;
}

export function keysBody(v: KeysView): Safe {
  return html`<section class="card">
<h1>API keys</h1>
${mintForm(v.csrf, v.formId, v.form ?? {}, v.error)}
<h2>Keys</h2>
${v.list.rows.length === 0 ? html`<p class="muted">No keys${v.later ? ' older than these' : ''}.</p>` : keyTable(v.csrf, v.list.rows)}
${pager('/admin/keys', { next: v.list.next, later: v.later })}
</section>`;
}

function mintForm(csrf: string, formId: string, f: KeyFields, error: string | undefined): Safe {
  return html`<h2>Mint a key</h2>
${problem(error)}
<form method="post" action="/admin/keys/mint">${csrfField(csrf)}<input type="hidden" name="form_id" value="${formId}">
<label class="field-label" for="k-plan">Plan</label>
<select id="k-plan" name="plan" required>
${Object.values(PLANS).map((p) => html`<option value="${p.name}"${p.name === f.plan ? html` selected` : null}>${p.title}</option>`)}
</select>
<label class="field-label" for="k-label">Label (optional)</label>
<input id="k-label" name="label" type="text" maxlength="200" value="${f.label ?? ''}">
<label class="field-label" for="k-email">Owner's e-mail (optional)</label>
<input id="k-email" name="email" type="email" maxlength="255" value="${f.email ?? ''}">
<label class="field-label" for="k-days">Days (optional: a one-time pass ends after this many days)</label>
<input id="k-days" name="days" type="number" min="1" max="99999" value="${f.days ?? ''}">
<div class="actions"><button class="btn primary" type="submit">Mint key</button></div>
</form>`;
}

function keyTable(csrf: string, rows: readonly KeyListRow[]): Safe {
  return html`<table class="grid">
<thead><tr><th>Prefix</th><th>Label</th><th>Plan</th><th>State</th><th>Created</th><th>Last used</th><th></th></tr></thead>
<tbody>
${rows.map(
  (k) => html`<tr>
<td class="mono">${k.prefix}</td><td>${k.label ?? ''}</td><td>${k.plan}</td>
<td>${k.state}${k.expires_at && k.state === 'active' ? html`<br><span class="muted">until ${when(k.expires_at)}</span>` : null}</td>
<td>${when(k.created_at)}</td><td>${when(k.last_used_at)}</td>
<td>${k.state === 'revoked' ? null : html`<form class="inline" method="post" action="/admin/keys/revoke">${csrfField(csrf)}<input type="hidden" name="prefix" value="${k.prefix}"><button class="btn danger" type="submit">Revoke</button></form>`}</td>
</tr>`,
)}
</tbody>
</table>`;
}

/**
 * The answer to a mint form sent again (a reload of its answer): the key it made, by prefix only, as
 * nothing shows a key twice.
 */
export function mintedBeforeBody(m: { prefix: string; state: string }): Safe {
  return html`<section class="card">
<h1>Key ${m.prefix} was already minted</h1>
<p class="lead">This form was sent before, and made key <strong class="mono">${m.prefix}</strong> (${m.state}); nothing new was minted.
Its key was shown once, on the answer to the first sending. If nobody copied it, revoke it and mint another.</p>
<div class="actions"><a class="btn" href="/admin/keys">Back to the keys</a></div>
</section>`;
}

/** The answer to a mint: the key itself, this once (the page is not cached and the key is in no URL). */
export function mintedBody(m: { key: string; prefix: string; plan: string; label: string | null; expires: Date | null }): Safe {
  return html`<section class="card">
<h1>New key ${m.prefix}</h1>
<p class="lead">Copy the key now: it is shown only this once. Sluice keeps only its hash, so it cannot show it again.</p>
<div class="copy-row"><input id="new-key" class="mono" type="text" readonly autocomplete="off" spellcheck="false" aria-label="The new API key" value="${m.key}"></div>
<p>Plan ${m.plan}${m.label === null ? null : html`, label <strong>${m.label}</strong>`}; ${m.expires ? html`ends ${when(m.expires)} (UTC)` : 'no end'}.</p>
<div class="actions"><a class="btn" href="/admin/keys">Back to the keys</a></div>
</section>`;
}
