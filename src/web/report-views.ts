import { layout } from './html.ts';
import { html, type Safe } from '../util/html.ts';
import { MAX_CONTACT, MAX_DETAILS } from '../abuse/reports.ts';
import { REASONS } from '../db/abuse.ts';
import type { View } from './views.ts';

const REASON_LABELS: Record<(typeof REASONS)[number], string> = {
  malware: 'Malware or a virus',
  phishing: 'Phishing or fraud',
  copyright: 'Copyright infringement',
  illegal: 'Other illegal content',
  other: 'Something else',
};

/**
 * GET /report/<code>: a plain form (no script needed) posting to /api/v1/reports; the answer to a
 * form post is a 303 back here with `?sent=<id>`. `error` is a refusal to show above the form.
 */
export function reportPage(v: View, code: string, o: { sent?: boolean; error?: string } = {}): Safe {
  const body = o.sent
    ? html`<section class="card center">
<h1>Thank you</h1>
<p class="lead">Your report about <code>${code}</code> was received. The operator of this server reviews every report.</p>
<div class="actions"><a class="btn" href="/">Back to Sluice</a></div>
</section>`
    : html`<section class="card" id="report">
<p class="eyebrow">Report abuse</p>
<h1>Report the files at <code>/${code}</code></h1>
<p class="lead">Tell the operator of this server what is wrong with these files. Your address is not stored; leave a contact if you want an answer.</p>
${o.error ? html`<p class="error" role="alert">${o.error}</p>` : null}
<form class="report-form" method="post" action="/api/v1/reports">
<input type="hidden" name="short_code" value="${code}">
<label>Reason <select name="reason" required>
${REASONS.map((r) => html`<option value="${r}">${REASON_LABELS[r]}</option>`)}
</select></label>
<label>Details <textarea name="details" maxlength="${MAX_DETAILS}" rows="6" placeholder="What is wrong, and where you found the link (optional)"></textarea></label>
<label>Your contact <input type="text" name="contact" maxlength="${MAX_CONTACT}" placeholder="E-mail address (optional)"></label>
<button class="btn primary" type="submit">Send report</button>
</form>
</section>`;
  return layout({ title: `Report ${code} · Sluice`, head: html`<meta name="robots" content="noindex">`, body, asset: v.asset });
}

/** A quarantined bundle's share or manage page (451). */
export function unavailablePage(v: View): Safe {
  const body = html`<section class="card center">
<p class="big-code">451</p>
<h1>Unavailable for legal reasons</h1>
<p class="lead">The operator of this server has withheld these files.</p>
<div class="actions"><a class="btn primary" href="/">Share your own files</a></div>
</section>`;
  return layout({ title: 'Unavailable · Sluice', body, asset: v.asset });
}
