import type { Sql } from '../db/sql.ts';
import { createApiKey } from '../auth/api-keys.ts';
import {
  insertPurchase,
  keyExpiresAt,
  lockSubscriptionPurchase,
  purchaseExists,
  setPurchaseKey,
  setPurchasePlan,
  setPurchaseStatus,
  setSubscriptionKeyExpiry,
  subscriptionPurchaseExists,
  takeSealedKey,
  type PurchaseInsert,
} from '../db/billing.ts';
import { PLANS, type PlanName } from '../plans.ts';
import type { Sealer } from '../util/sealer.ts';
import type { Outbox } from '../mail/outbox.ts';
import { keyMail } from '../mail/messages.ts';

/** A one-time purchase is a 30-day pass. */
export const PASS_DAYS = 30;
/** The plaintext key waits (sealed) this long for the success page, then only the mail has it. */
export const REVEAL_WINDOW_MINUTES = 60;
/** A subscription whose payment failed keeps its key working this long. */
export const GRACE_DAYS = 7;

/** One paid checkout session, as the webhook read it. */
export type PaidSession = PurchaseInsert;

const revealContext = (sessionId: string): string => `purchase:${sessionId}`;

/**
 * Mints the key of one paid checkout session, seals it for the success page and queues its mail,
 * all in the caller's transaction. The unique session id makes a second call a no-op: however
 * often or concurrently Stripe delivers the event, one key exists. Returns whether it minted.
 */
export async function mintForSession(
  tx: Sql,
  s: PaidSession,
  deps: { sealer: Sealer; outbox: Outbox; baseUrl: string },
): Promise<boolean> {
  const purchaseId = await insertPurchase(tx, s);
  if (purchaseId === undefined) return false;
  const days = s.mode === 'payment' ? PASS_DAYS : null;
  const label = s.mode === 'payment' ? 'Stripe 30-day pass' : 'Stripe subscription';
  const { key, row } = await createApiKey(tx, { plan: s.plan, label, email: s.email, days });
  await setPurchaseKey(tx, purchaseId, row.id, deps.sealer.seal(key, revealContext(s.sessionId)), REVEAL_WINDOW_MINUTES);
  const mail = keyMail({ to: s.email, key, plan: PLANS[s.plan], mode: s.mode, expiresAt: row.expires_at, baseUrl: deps.baseUrl });
  await deps.outbox.enqueue(mail, tx);
  return true;
}

export type Reveal =
  | { kind: 'key'; key: string; plan: PlanName; mode: 'subscription' | 'payment'; expiresAt: Date | null }
  | { kind: 'gone' }
  | { kind: 'pending' };

/**
 * Takes the sealed key out of its row in one statement: of two concurrent reveals exactly one sees
 * it. `gone`: shown before or the hour passed; `pending`: the webhook has not arrived yet.
 */
export async function revealKey(sql: Sql, sealer: Sealer, sessionId: string): Promise<Reveal> {
  const r = await takeSealedKey(sql, sessionId);
  if (r) {
    const key = sealer.open(r.key_sealed, revealContext(sessionId));
    return { kind: 'key', key, plan: r.plan, mode: r.mode, expiresAt: await keyExpiresAt(sql, r.api_key_id) };
  }
  return (await purchaseExists(sql, sessionId)) ? { kind: 'gone' } : { kind: 'pending' };
}

/**
 * Applies one subscription event to the purchase and its key, in the caller's transaction. Events
 * older than the last one applied are ignored (Stripe does not order deliveries), and `canceled` is final.
 */
export async function applySubscriptionState(
  tx: Sql,
  o: { subscriptionId: string; eventAt: Date; state: 'active' | 'past_due' | 'canceled' | 'paused'; plan?: PlanName | null },
): Promise<'applied' | 'ignored' | 'no-purchase'> {
  const p = await lockSubscriptionPurchase(tx, o.subscriptionId, o.eventAt);
  if (!p) {
    return (await subscriptionPurchaseExists(tx, o.subscriptionId)) ? 'ignored' : 'no-purchase';
  }
  if (p.status === 'canceled') return 'ignored';
  if (o.plan && o.plan !== p.plan) await setPurchasePlan(tx, p, o.plan);
  const status = o.state === 'paused' ? 'past_due' : o.state;
  await setPurchaseStatus(tx, p.id, status, o.eventAt);
  if (p.api_key_id === null) return 'applied';
  await setSubscriptionKeyExpiry(tx, p.api_key_id, o.state, GRACE_DAYS);
  return 'applied';
}
