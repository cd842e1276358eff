import type { Ctx } from '../http/context.ts';
import type { Route } from '../http/server.ts';
import { readSmallBody } from '../http/body-in.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import { send, sendError, sendJson } from '../http/reply.ts';
import { AppError, toAppError } from '../errors.ts';
import { isPlanName, PLANS } from '../plans.ts';
import { isEmail } from '../util/names.ts';
import { loadAssets } from '../web/assets.ts';
import { sendHtml } from '../web/html.ts';
import { serverView } from '../web/views.ts';
import {
  allOffers, billingErrorPage, plansPage, portalOpenPage, portalPage, successGonePage, successKeyPage, successPendingPage,
} from '../web/billing-views.ts';
import { PORTAL_TOKEN_RE, type Billing } from '../billing/billing.ts';
import type { Deps } from '../deps.ts';

const FORM_LIMIT = 16 * 1024;
/** Stripe event payloads are a few kilobytes; anything past this is not one. */
const WEBHOOK_LIMIT = 1024 * 1024;
const SESSION_ID_RE = /^cs_[A-Za-z0-9_]{1,250}$/;
/** How often the success page reloads itself (every 3 s) waiting for the webhook. */
const PENDING_RELOADS = 30;
/**
 * Each purchase or portal form costs a Stripe API call or a lookup and maybe a mail: per client
 * address at most this many per window (pages spend no API budget, so they get their own).
 */
const FORM_POSTS = 20;
const FORM_WINDOW_MS = 10 * 60 * 1000;
/** Where the purchase and portal forms' 303s lead: the pages allow them in form-action. */
const STRIPE_FORM_TARGETS = ['https://checkout.stripe.com', 'https://billing.stripe.com'];

/**
 * Key purchase pages and the Stripe webhook. Web paths, not /api/: they spend no rate-limit budget
 * and are outside openapi.json. Pages are HTML under the strict CSP; the webhook answers JSON.
 *   GET  /api-keys                 plans and the purchase form
 *   POST /api-keys                 → 303 to a Stripe Checkout Session
 *   GET  /api-keys/success         the minted key, once
 *   POST /api-keys/webhook         Stripe events (signed)
 *   GET|POST /api-keys/portal      ask for a billing-portal link by e-mail
 *   GET|POST /api-keys/portal/open spend that link → 303 to the Stripe Billing Portal
 */
export function billingRoutes(deps: Deps & { billing: Billing }): Route[] {
  const { billing, log } = deps;
  const assets = loadAssets();
  const view = serverView(assets, deps.config);
  const offers = allOffers((plan, option) => billing.priceOf(plan, option) !== undefined);
  const plans = (ctx: Ctx, status = 200, error?: string, email?: string): void =>
    sendHtml(ctx, status, plansPage(view, { configured: billing.configured, offers, error, email }), 'no-cache', STRIPE_FORM_TARGETS);
  const redirect = (ctx: Ctx, url: string): void => send(ctx, 303, '', [['Location', url], ['Cache-Control', 'no-store']]);
  /** Errors of page handlers become an HTML page with the error's status. */
  const page = (fn: (ctx: Ctx) => Promise<void>) => async (ctx: Ctx): Promise<void> => {
    try {
      await fn(ctx);
    } catch (err) {
      const e = toAppError(err);
      if (e.status >= 500 && e.code !== 'PAYMENT_PROVIDER_ERROR' && e.code !== 'BILLING_NOT_CONFIGURED') log.error({ err, reqId: ctx.id }, 'billing page failed');
      sendHtml(ctx, e.status, billingErrorPage(view, e.message), 'no-store');
    }
  };
  /**
   * Starts reading a form body (before the handler's first await). It is awaited only after the
   * throttle and the content-type check, which may throw first: its rejection (too large, client
   * gone) is observed here, or each such post logged an unhandled rejection.
   */
  const formBody = (ctx: Ctx): Promise<Buffer> => {
    const body = readSmallBody(ctx, FORM_LIMIT);
    body.catch(() => {});
    return body;
  };
  const form = async (ctx: Ctx, body: Promise<Buffer>): Promise<URLSearchParams> => {
    // Our pages' own forms only: another site must not start checkouts, mail portal links or
    // open a portal session in a visitor's browser.
    refuseOtherSite(ctx, deps.origin(ctx));
    const ct = ctx.headers['content-type'] ?? '';
    if (!ct.startsWith('application/x-www-form-urlencoded')) throw new AppError('INVALID_FIELD', 'Expected a form');
    return new URLSearchParams((await body).toString('utf8'));
  };

  /** Counts one form post of this client; throws RATE_LIMITED past FORM_POSTS (fails open with the store). */
  const throttle = async (ctx: Ctx): Promise<void> => {
    const hit = await deps.store.hit(`billing-form:${deps.access.ipOf(ctx)}`, FORM_WINDOW_MS).catch(() => null);
    if (hit && hit.count > FORM_POSTS) {
      ctx.replyHeaders.push(['Retry-After', String(Math.max(1, Math.ceil(hit.resetMs / 1000)))]);
      throw new AppError('RATE_LIMITED', 'Too many requests from your address; try again in a few minutes');
    }
  };

  const buy = page(async (ctx) => {
    const body = formBody(ctx);
    await throttle(ctx);
    const f = await form(ctx, body);
    if (!billing.configured) return plans(ctx, 503);
    const email = (f.get('email') ?? '').trim();
    const [plan = '', option = ''] = (f.get('choice') ?? `${f.get('plan') ?? ''}:${f.get('billing') ?? ''}`).split(':');
    if (!isEmail(email) || email.length > 255) return plans(ctx, 400, 'Enter a valid e-mail address.', email);
    if (!isPlanName(plan) || (option !== 'monthly' && option !== 'once') || !billing.priceOf(plan, option)) {
      return plans(ctx, 400, 'Choose one of the plans below.', email);
    }
    redirect(ctx, await billing.checkout(plan, option, email, deps.origin(ctx)));
  });

  const webhook = async (ctx: Ctx): Promise<void> => {
    const body = readSmallBody(ctx, WEBHOOK_LIMIT);
    const signature = ctx.headers['stripe-signature'];
    try {
      const raw = await body;
      await billing.webhook(raw, signature);
      sendJson(ctx, 200, { success: true, received: true });
    } catch (err) {
      const e = toAppError(err);
      if (e.code === 'WEBHOOK_TOO_EARLY') log.warn({ reqId: ctx.id }, 'Stripe event before its purchase: answered 503, Stripe delivers it again');
      else if (e.status >= 500 && e.code !== 'BILLING_NOT_CONFIGURED') log.error({ err, reqId: ctx.id }, 'Stripe webhook failed');
      else if (e.code === 'WEBHOOK_SIGNATURE_INVALID') log.warn({ reqId: ctx.id }, 'Stripe webhook with a bad signature');
      else if (e.code === 'WEBHOOK_MALFORMED') log.error({ err: e.cause ?? err, reqId: ctx.id }, 'signed Stripe event refused as malformed (400: Stripe stops retrying it)');
      // A large body is answered at once; the connection closes instead of draining it.
      sendError(ctx, e, e.code === 'PAYLOAD_TOO_LARGE');
    }
  };

  const success = page(async (ctx) => {
    if (!billing.configured) throw new AppError('BILLING_NOT_CONFIGURED');
    const sessionId = ctx.query.get('session_id') ?? '';
    if (!SESSION_ID_RE.test(sessionId)) throw new AppError('NOT_FOUND');
    const r = await billing.reveal(sessionId);
    // The key page must never be kept by a browser cache or proxy.
    if (r.kind === 'key') sendHtml(ctx, 200, successKeyPage(view, { ...r, plan: PLANS[r.plan] }), 'no-store');
    else if (r.kind === 'gone') sendHtml(ctx, 200, successGonePage(view), 'no-store');
    else {
      // Reloads are counted in the URL and stop after PENDING_RELOADS (a minute and a half).
      const n = Math.max(0, Math.min(PENDING_RELOADS, Number.parseInt(ctx.query.get('n') ?? '0', 10) || 0));
      const next = n < PENDING_RELOADS ? `/api-keys/success?session_id=${encodeURIComponent(sessionId)}&n=${n + 1}` : null;
      sendHtml(ctx, 200, successPendingPage(view, next), 'no-store');
    }
  });

  const portalAsk = page(async (ctx) => {
    const body = formBody(ctx);
    await throttle(ctx);
    const f = await form(ctx, body);
    if (!billing.configured) return sendHtml(ctx, 503, portalPage(view, { configured: false, sent: false }));
    const email = (f.get('email') ?? '').trim();
    // The same answer, at once, whatever the address: the lookup and the mail happen afterwards.
    sendHtml(ctx, 200, portalPage(view, { configured: true, sent: true }), 'no-store');
    if (isEmail(email) && email.length <= 255) {
      billing.requestPortalLink(email).catch((err: unknown) => log.error({ err }, 'portal link not sent'));
    }
  });

  const portalOpen = page(async (ctx) => {
    if (!billing.configured) return sendHtml(ctx, 503, portalPage(view, { configured: false, sent: false }));
    const token = ctx.query.get('token') ?? '';
    sendHtml(ctx, 200, portalOpenPage(view, PORTAL_TOKEN_RE.test(token) ? token : null), 'no-store', STRIPE_FORM_TARGETS);
  });

  const portalGo = page(async (ctx) => {
    const body = formBody(ctx);
    const f = await form(ctx, body);
    const url = await billing.openPortal(f.get('token') ?? '', deps.origin(ctx));
    if (url === null) return sendHtml(ctx, 410, portalOpenPage(view, null), 'no-store');
    redirect(ctx, url);
  });

  return [
    { method: 'get', pattern: '/api-keys', handler: (ctx) => plans(ctx) },
    { method: 'head', pattern: '/api-keys', handler: (ctx) => plans(ctx) },
    { method: 'post', pattern: '/api-keys', handler: buy },
    { method: 'post', pattern: '/api-keys/webhook', handler: webhook },
    // The key is shown once: a HEAD (a link checker, a prefetch) must not spend it.
    { method: 'get', pattern: '/api-keys/success', getOnly: true, handler: success },
    { method: 'get', pattern: '/api-keys/portal', handler: (ctx) => sendHtml(ctx, 200, portalPage(view, { configured: billing.configured, sent: false })) },
    { method: 'post', pattern: '/api-keys/portal', handler: portalAsk },
    { method: 'get', pattern: '/api-keys/portal/open', handler: portalOpen },
    { method: 'post', pattern: '/api-keys/portal/open', handler: portalGo },
  ];
}
