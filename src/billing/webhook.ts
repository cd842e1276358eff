import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import { isPlanName, type PlanName } from '../plans.ts';
import type { Sealer } from '../util/sealer.ts';
import type { Outbox } from '../mail/outbox.ts';
import { applySubscriptionState, mintForSession } from './purchases.ts';
import { AppError } from '../errors.ts';
import { onceForStripeEvent } from '../db/billing.ts';

/** The part of a Stripe event this module reads (objects are read defensively across API versions). */
export interface StripeEventLike {
  readonly id: string;
  readonly type: string;
  /** Unix seconds. */
  readonly created: number;
  readonly data: { readonly object: Record<string, unknown> };
}

export interface WebhookDeps {
  readonly sql: Sql;
  readonly sealer: Sealer;
  readonly outbox: Outbox;
  readonly log: Logger;
  readonly baseUrl: string;
  /** Monthly price id → plan, for plan changes made in the billing portal. */
  readonly planOfPrice: ReadonlyMap<string, PlanName>;
}

const idOf = (v: unknown): string | null =>
  typeof v === 'string' ? v : v && typeof v === 'object' && typeof (v as { id?: unknown }).id === 'string' ? (v as { id: string }).id : null;

/**
 * Applies one verified event exactly once: the event id is recorded in the same transaction as its
 * effects, so a redelivery (or a concurrent duplicate, which waits on the unique index) changes
 * nothing, and a failure rolls both back so Stripe's retry redoes it. Returns whether anything was new.
 */
export async function handleStripeEvent(event: StripeEventLike, deps: WebhookDeps): Promise<boolean> {
  return onceForStripeEvent(deps.sql, event.id, event.type, (tx) => apply(tx, event, deps));
}

async function apply(tx: Sql, event: StripeEventLike, deps: WebhookDeps): Promise<void> {
  const o = event.data.object;
  const eventAt = new Date(event.created * 1000);
  switch (event.type) {
    case 'checkout.session.completed':
    case 'checkout.session.async_payment_succeeded': {
      // Delayed payment methods complete unpaid and succeed later: mint only once money arrived.
      if (o.payment_status !== 'paid' && o.payment_status !== 'no_payment_required') return;
      const metadata = (o.metadata ?? {}) as Record<string, string>;
      const plan = metadata.plan ?? '';
      const details = (o.customer_details ?? {}) as { email?: string | null };
      const email = details.email ?? (typeof o.customer_email === 'string' ? o.customer_email : null);
      const mode = o.mode === 'subscription' || o.mode === 'payment' ? o.mode : null;
      if (!isPlanName(plan) || !email || !mode || typeof o.id !== 'string') {
        deps.log.error({ eventId: event.id, session: o.id }, 'checkout session without plan, e-mail or mode: no key minted');
        return;
      }
      const minted = await mintForSession(
        tx,
        { sessionId: o.id, mode, plan, email, customerId: idOf(o.customer), subscriptionId: idOf(o.subscription) },
        deps,
      );
      deps.log.info({ eventId: event.id, plan, mode, minted }, 'checkout session completed');
      return;
    }
    case 'customer.subscription.created':
    case 'customer.subscription.updated':
    case 'customer.subscription.paused':
    case 'customer.subscription.resumed':
    case 'customer.subscription.deleted': {
      const id = idOf(o);
      if (!id) return;
      const state = event.type === 'customer.subscription.deleted' ? 'canceled' : subscriptionState(String(o.status));
      if (state === null) return;
      const r = await applySubscriptionState(tx, { subscriptionId: id, eventAt, state, plan: planOf(o, deps.planOfPrice) });
      if (r === 'no-purchase' && ours(o.metadata)) throw new AppError('WEBHOOK_TOO_EARLY');
      return;
    }
    case 'invoice.payment_failed':
    case 'invoice.paid': {
      const parent = (o.parent ?? {}) as { subscription_details?: { subscription?: unknown } | null };
      const id = idOf(parent.subscription_details?.subscription) ?? idOf(o.subscription);
      if (!id) return; // one-time payments have no subscription: nothing to do
      const r = await applySubscriptionState(tx, { subscriptionId: id, eventAt, state: event.type === 'invoice.paid' ? 'active' : 'past_due' });
      const details = (parent.subscription_details ?? (o.subscription_details as { metadata?: unknown } | undefined)) as { metadata?: unknown } | undefined;
      if (r === 'no-purchase' && ours(details?.metadata)) throw new AppError('WEBHOOK_TOO_EARLY');
      return;
    }
    default:
      // Recorded (so a redelivery is cheap) and otherwise ignored.
      return;
  }
}

/**
 * A subscription Sluice's checkout created (its metadata carries the plan). An event about one
 * whose purchase is not recorded yet (its checkout.session.completed failed and awaits Stripe's
 * retry) must not be swallowed: answering 503 rolls the event back and Stripe delivers it again.
 * Other subscriptions on the same Stripe account are none of our business.
 */
function ours(metadata: unknown): boolean {
  return typeof (metadata as { plan?: unknown } | null | undefined)?.plan === 'string';
}

/** Stripe subscription status → key state; null: leave the key as it is (checkout still in progress). */
function subscriptionState(status: string): 'active' | 'past_due' | 'canceled' | 'paused' | null {
  switch (status) {
    case 'active':
    case 'trialing':
      return 'active';
    case 'past_due':
    case 'unpaid':
      return 'past_due';
    case 'paused':
      return 'paused';
    case 'canceled':
    case 'incomplete_expired':
      return 'canceled';
    default:
      return null; // incomplete: the first payment is still being attempted
  }
}

function planOf(sub: Record<string, unknown>, planOfPrice: ReadonlyMap<string, PlanName>): PlanName | null {
  const items = ((sub.items as { data?: Array<{ price?: unknown }> } | undefined)?.data ?? []);
  for (const item of items) {
    const plan = planOfPrice.get(idOf(item.price) ?? '');
    if (plan) return plan;
  }
  return null;
}
