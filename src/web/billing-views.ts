import { layout } from './html.ts';
import { html, humanSize, type Safe } from '../util/html.ts';
import { PLANS, type Plan, type PlanName } from '../plans.ts';
import { sqlUtc } from '../util/time.ts';
import type { View } from './views.ts';

export interface PlanOffer {
  readonly plan: Plan;
  readonly monthly: boolean;
  readonly once: boolean;
}

/** Plan prices are in US dollars (the Stripe prices an operator sets should match). */
const price = (p: Plan): string => `US$${p.price.toFixed(2)}`;

function limits(p: Plan): Safe {
  const expiry = p.expiryDays === null ? 'files never expire' : `bundles kept ${p.expiryDays} days`;
  const size = `${humanSize(p.maxBundleBytes)} ${p.name === 'premium' ? 'per upload' : 'per bundle'}`;
  return html`<ul class="limits"><li>${size}</li><li>${expiry}</li><li>${p.requestsPerHour} API requests per hour</li><li>your bundles listed and managed through <code>/my/*</code></li></ul>`;
}

/** GET /api-keys: the plan table from the one plan table, and the purchase form. */
export function plansPage(v: View, o: { configured: boolean; offers: readonly PlanOffer[]; error?: string; email?: string }): Safe {
  const cards = o.offers.map(
    ({ plan, monthly, once }) => html`<div class="plan card" id="plan-${plan.name}">
<h2>${plan.title}</h2>
<p class="price">${price(plan)} <span class="muted">a month</span></p>
<p class="pass muted">or ${price(plan)} once for a 30-day pass</p>
${limits(plan)}
${o.configured
  ? html`<div class="actions">
<button class="btn primary" type="submit" name="choice" value="${plan.name}:monthly" form="buy"${monthly ? '' : ' disabled'}>Subscribe monthly</button>
<button class="btn" type="submit" name="choice" value="${plan.name}:once" form="buy"${once ? '' : ' disabled'}>30-day pass</button>
</div>`
  : null}
</div>`,
  );
  const form = o.configured
    ? html`<form id="buy" class="card" method="post" action="/api-keys">
<label class="field-label" for="email">E-mail: the key is sent here, and it opens the billing portal later</label>
<input id="email" name="email" type="email" required maxlength="255" autocomplete="email" placeholder="you@example.com" value="${o.email ?? ''}">
${o.error ? html`<p class="error" role="alert">${o.error}</p>` : null}
<p class="muted">Pick a plan below. Payment is handled by Stripe; the key is shown once after payment and e-mailed to you.
Manage a subscription (plan, payment method, cancel) in the <a href="/api-keys/portal">billing portal</a>.</p>
</form>`
    : html`<section class="card" id="not-configured"><p class="error" role="status">Billing is not configured on this server: keys cannot be bought here. Ask the operator for a key.</p></section>`;
  const body = html`<section class="card"><p class="eyebrow">API keys</p><h1>Higher limits with an API key</h1>
<p class="lead">Monthly subscription (renews until cancelled) or a one-time 30-day pass; the limits are the same.</p></section>
${form}
<div class="plans">${cards}</div>`;
  return layout({ title: 'API keys · Sluice', body, asset: v.asset });
}

export const allOffers = (has: (plan: PlanName, option: 'monthly' | 'once') => boolean): PlanOffer[] =>
  (Object.values(PLANS) as Plan[]).map((plan) => ({ plan, monthly: has(plan.name, 'monthly'), once: has(plan.name, 'once') }));

/** GET /api-keys/success: the key, once. */
export function successKeyPage(v: View, o: { key: string; plan: Plan; mode: 'subscription' | 'payment'; expiresAt: Date | null }): Safe {
  const term =
    o.mode === 'subscription'
      ? 'It works while the subscription runs.'
      : `It is a 30-day pass: it stops working at ${o.expiresAt ? sqlUtc(o.expiresAt) : ''} UTC.`;
  const body = html`<section class="card" id="key-shown">
<p class="eyebrow">Thank you</p>
<h1>Your ${o.plan.title} API key</h1>
<label class="field-label" for="api-key">Copy it now: this page shows it only once (it was also e-mailed to you)</label>
<div class="copy-row"><input id="api-key" readonly value="${o.key}"></div>
<p class="meta">${term} Send it as <code>Authorization: Bearer &lt;key&gt;</code>.</p>
</section>`;
  return layout({ title: 'Your API key · Sluice', body, asset: v.asset });
}

export function successGonePage(v: View): Safe {
  const body = html`<section class="card" id="key-gone"><h1>This key was already shown</h1>
<p class="lead">For safety a purchased key is shown only once and for one hour. It was e-mailed to the address you paid with.</p>
<div class="actions"><a class="btn" href="/api-keys/portal">Billing portal</a></div></section>`;
  return layout({ title: 'API key · Sluice', body, asset: v.asset });
}

/**
 * The webhook has not arrived yet: the page reloads itself (a meta refresh: no script needed) to
 * `next`, the same page one attempt on, or, once `next` is null (the attempts are spent: a slow
 * webhook, or a session id that never was), stops and points at the mail.
 */
export function successPendingPage(v: View, next: string | null): Safe {
  const body = html`<section class="card" id="key-pending"><h1>Confirming your payment…</h1>
${next === null
  ? html`<p class="lead">This is taking longer than usual. Your key arrives by e-mail once the payment is confirmed; reload this page to look again.</p>`
  : html`<p class="lead">This page reloads by itself. Your key also arrives by e-mail.</p>`}</section>`;
  const head = next === null ? undefined : html`<meta http-equiv="refresh" content="3; url=${next}">`;
  return layout({ title: 'Confirming payment · Sluice', head, body, asset: v.asset });
}

/** GET /api-keys/portal and the answer to its POST (the same page whatever the address). */
export function portalPage(v: View, o: { configured: boolean; sent: boolean }): Safe {
  const body = !o.configured
    ? html`<section class="card"><p class="error" role="status">Billing is not configured on this server.</p></section>`
    : html`<section class="card" id="portal">
<p class="eyebrow">Billing</p><h1>Manage your subscription</h1>
${o.sent
  ? html`<p class="lead" id="portal-sent" role="status">If that address bought a key here, a link to the billing portal is on its way. It works once, for 30 minutes.</p>`
  : html`<p class="lead">Enter the e-mail you paid with; we send you a one-time link to the Stripe billing portal (change plan, payment method, cancel).</p>`}
<form method="post" action="/api-keys/portal">
<label class="field-label" for="email">E-mail</label>
<div class="row"><input id="email" name="email" type="email" required maxlength="255" autocomplete="email" placeholder="you@example.com">
<button class="btn primary" type="submit">Send link</button></div>
</form></section>`;
  return layout({ title: 'Billing · Sluice', body, asset: v.asset });
}

/** GET /api-keys/portal/open: a button, so mail scanners that follow links do not spend the token. */
export function portalOpenPage(v: View, token: string | null): Safe {
  const body =
    token === null
      ? html`<section class="card" id="portal-invalid"><h1>This link no longer works</h1>
<p class="lead">Billing links work once and for 30 minutes.</p>
<div class="actions"><a class="btn primary" href="/api-keys/portal">Send a new link</a></div></section>`
      : html`<section class="card" id="portal-open"><h1>Open the billing portal</h1>
<form method="post" action="/api-keys/portal/open"><input type="hidden" name="token" value="${token}">
<button class="btn primary big" type="submit">Continue to Stripe</button></form></section>`;
  return layout({ title: 'Billing · Sluice', body, asset: v.asset });
}

export function billingErrorPage(v: View, message: string): Safe {
  const body = html`<section class="card"><h1>Something went wrong</h1><p class="error" role="alert">${message}</p>
<div class="actions"><a class="btn" href="/api-keys">Back to plans</a></div></section>`;
  return layout({ title: 'Error · Sluice', body, asset: v.asset });
}
