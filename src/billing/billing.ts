import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Sql } from '../db/sql.ts';
import { AppError } from '../errors.ts';
import { PLANS, type PlanName } from '../plans.ts';
import type { Sealer } from '../util/sealer.ts';
import { hashSecret } from '../util/tokens.ts';
import type { Outbox } from '../mail/outbox.ts';
import { portalMail } from '../mail/messages.ts';
import type { Stripe } from './stripe-client.ts';
import { handleStripeEvent, type StripeEventLike } from './webhook.ts';
import { revealKey, type Reveal } from './purchases.ts';
import {
  customerForEmail,
  insertPortalToken,
  livePortalTokens,
  purgeBillingRows,
  purgeExpiredReveals,
  unusePortalToken,
  usePortalToken,
} from '../db/billing.ts';

export type BillingOption = 'monthly' | 'once';
/**
 * Signed webhook timestamps further than this from now, either way, are refused. Stripe's library
 * checks only the past; the future is checked in `webhook`.
 */
const WEBHOOK_TOLERANCE_SECONDS = 300;
const PORTAL_LINK_MINUTES = 30;

export interface Billing {
  /** STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET are set. */
  readonly configured: boolean;
  /** The Stripe price id of a plan and option, if the operator set one. */
  priceOf(plan: PlanName, option: BillingOption): string | undefined;
  /** Creates a Checkout Session and returns its URL; Stripe sends the buyer back to `origin`. */
  checkout(plan: PlanName, option: BillingOption, email: string, origin: string): Promise<string>;
  /** Verifies the Stripe-Signature over the raw body and applies the event once. */
  webhook(raw: Buffer, signature: string | undefined): Promise<void>;
  reveal(sessionId: string): Promise<Reveal>;
  /** Mails a single-use portal link if the address bought something; silent otherwise. */
  requestPortalLink(email: string): Promise<void>;
  /** Spends a portal token and returns the Billing Portal session URL; null for an unknown, used or expired token. */
  openPortal(token: string, origin: string): Promise<string | null>;
  /** Periodic: forgets unrevealed keys past their hour, used portal tokens and old event ids. */
  housekeeping(): Promise<void>;
}

export const PORTAL_TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

export function createBilling(deps: {
  config: Config;
  sql: Sql;
  stripe: Stripe | null;
  sealer: Sealer;
  outbox: Outbox;
  log: Logger;
  /** Called after something was queued for mail, so it goes out now rather than at the next tick. */
  mailQueued: () => void;
}): Billing {
  const { config, sql, stripe, sealer, outbox, log } = deps;
  const planOfPrice = new Map<string, PlanName>();
  for (const plan of Object.keys(PLANS) as PlanName[]) {
    const price = config.stripePrices[`${plan}_monthly`];
    if (price) planOfPrice.set(price, plan);
  }
  const configured = stripe !== null && config.stripeWebhookSecret !== undefined;
  const requireStripe = (): Stripe => {
    if (!stripe || !configured) throw new AppError('BILLING_NOT_CONFIGURED');
    return stripe;
  };
  const providerError = (err: unknown): AppError => {
    log.error({ err }, 'Stripe API call failed');
    return new AppError('PAYMENT_PROVIDER_ERROR', undefined, { cause: err });
  };

  return {
    configured,
    priceOf: (plan, option) => config.stripePrices[`${plan}_${option}`],

    async checkout(plan, option, email, origin) {
      const s = requireStripe();
      const price = config.stripePrices[`${plan}_${option}`];
      if (!price) throw new AppError('INVALID_FIELD', 'This plan cannot be bought that way on this server');
      const mode = option === 'monthly' ? 'subscription' : 'payment';
      try {
        const session = await s.checkout.sessions.create({
          mode,
          line_items: [{ price, quantity: 1 }],
          customer_email: email,
          success_url: `${origin}/api-keys/success?session_id={CHECKOUT_SESSION_ID}`,
          cancel_url: `${origin}/api-keys`,
          metadata: { plan, billing: option },
          ...(mode === 'subscription' ? { subscription_data: { metadata: { plan } } } : { customer_creation: 'always' as const }),
        });
        if (!session.url) throw new Error('checkout session without url');
        return session.url;
      } catch (err) {
        throw providerError(err);
      }
    },

    async webhook(raw, signature) {
      const s = requireStripe();
      let event: StripeEventLike;
      try {
        event = s.webhooks.constructEvent(raw, signature ?? '', config.stripeWebhookSecret!, WEBHOOK_TOLERANCE_SECONDS) as unknown as StripeEventLike;
      } catch (err) {
        throw new AppError('WEBHOOK_SIGNATURE_INVALID', undefined, { cause: err });
      }
      // A signature dated ahead would otherwise stay replayable for as long as it is ahead.
      if (signedAt(signature!) - Date.now() / 1000 > WEBHOOK_TOLERANCE_SECONDS) {
        throw new AppError('WEBHOOK_SIGNATURE_INVALID', 'Stripe-Signature timestamp is in the future');
      }
      if (!wellFormed(event)) throw new AppError('WEBHOOK_MALFORMED');
      let fresh: boolean;
      try {
        fresh = await handleStripeEvent(event, { sql, sealer, outbox, log, baseUrl: config.baseUrl, planOfPrice });
      } catch (err) {
        // A signed but malformed event can never succeed: a 400 shows it in Stripe's dashboard
        // instead of three days of retries. Only the database being away stays a 500.
        if (malformedInput(err)) throw new AppError('WEBHOOK_MALFORMED', undefined, { cause: err });
        throw err;
      }
      if (fresh) deps.mailQueued();
      else log.info({ eventId: event.id, type: event.type }, 'duplicate Stripe event ignored');
    },

    reveal: (sessionId) => revealKey(sql, sealer, sessionId),

    async requestPortalLink(email) {
      const customer = await customerForEmail(sql, email);
      if (!customer) return;
      // Bounds the mail anyone can make us send to one address by asking for links.
      if ((await livePortalTokens(sql, customer)) >= 3) return;
      const token = randomBytes(32).toString('base64url');
      await insertPortalToken(sql, hashSecret(token), customer, PORTAL_LINK_MINUTES, async (tx) => {
        const link = `${config.baseUrl}/api-keys/portal/open?token=${token}`;
        await outbox.enqueue(portalMail({ to: email, link, validMinutes: PORTAL_LINK_MINUTES }), tx);
      });
      deps.mailQueued();
    },

    async openPortal(token, origin) {
      const s = requireStripe();
      if (!PORTAL_TOKEN_RE.test(token)) return null;
      const hash = hashSecret(token);
      const customerId = await usePortalToken(sql, hash);
      if (customerId === undefined) return null;
      try {
        const session = await s.billingPortal.sessions.create({ customer: customerId, return_url: `${origin}/api-keys` });
        return session.url;
      } catch (err) {
        // Stripe was not reached: the link stays usable for another try.
        await unusePortalToken(sql, hash).catch(() => {});
        throw providerError(err);
      }
    },

    async housekeeping() {
      await purgeExpiredReveals(sql);
      await purgeBillingRows(sql);
    },
  };
}

const plainText = (v: unknown): boolean => typeof v === 'string' && v.length > 0 && v.length <= 255 && !/[\u0000-\u001f]/.test(v);

/** The envelope every handled event needs: ids and type as plain text, a sane time, an object. */
function wellFormed(e: StripeEventLike): boolean {
  const x = e as unknown as Record<string, unknown> | null;
  if (!x || typeof x !== 'object' || Array.isArray(x)) return false;
  const data = x.data as Record<string, unknown> | null | undefined;
  const object = data && typeof data === 'object' ? data.object : null;
  return (
    plainText(x.id) && plainText(x.type) && Number.isSafeInteger(x.created) && (x.created as number) >= 0 &&
    (x.created as number) < 1e11 && !!object && typeof object === 'object' && !Array.isArray(object)
  );
}

/**
 * Text inside an event that PostgreSQL refuses (22xxx data exceptions: NUL bytes, bad escapes,
 * out-of-range values). Anything else, such as a shape our code did not expect, stays a 500: Stripe
 * keeps retrying, and a fix deployed meanwhile still applies a paid checkout.
 */
function malformedInput(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('22');
}

/** The `t=` of a Stripe-Signature header the library already verified (so it is there). */
function signedAt(header: string): number {
  const t = header.split(',').find((part) => part.trim().startsWith('t='));
  return Number(t?.trim().slice(2));
}
