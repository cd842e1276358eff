import { html, plural, type Safe } from '../util/html.ts';
import { longestExpiryDays } from '../bundles/expiry.ts';

/** The lengths, in days, the upload page offers for a new bundle's `expires_in_days`. */
const CHOICES = [1, 2, 3, 7, 14, 30, 90, 365, 3650];

const lasting = (days: number): string => (days % 365 === 0 ? plural(days / 365, 'year') : plural(days, 'day'));

/**
 * The upload form's optional "Expires after": first the plan's own expiry (no field sent), then the
 * choices up to what `anonDays`, the page's expiry without a key, allows. Longer ones are rendered
 * hidden and disabled; upload.js shows those the plan of a pasted key allows (`data-longest` for
 * one whose bundles never expire).
 */
export function expirySelect(anonDays: number): Safe {
  const most = longestExpiryDays(anonDays);
  return html`<label>Expires after <select name="expires_in_days" id="expiry" data-anon="${anonDays}" data-longest="${longestExpiryDays(null)}">
<option value="">Default (${lasting(anonDays)})</option>
${CHOICES.map((d) => html`<option value="${d}"${d > most ? html` hidden disabled` : null}>${lasting(d)}</option>`)}
</select></label>`;
}
