import type { Sql } from '../db/client.ts';
import { createApiKey } from '../auth/api-keys.ts';
import { PLANS, type PlanName } from '../auth/plans.ts';
import type { Sealer } from '../auth/sealer.ts';
import type { Outbox } from '../mail/outbox.ts';
import { keyMail } from '../mail/messages.ts';

/** A one-time purchase is a 30-day pass. */
export const PASS_DAYS = 30;
/** The plaintext key waits (sealed) this long for the success page, then only the mail has it. */
export const REVEAL_WINDOW_MINUTES = 60;
/** A subscription whose payment failed keeps its key working this long. */
export const GRACE_DAYS = 7;

export interface PaidSession {
  readonly sessionId: string;
  readonly mode: 'subscription' | 'payment';
  readonly plan: PlanName;
  readonly email: string;
  readonly customerId: string | null;
  readonly subscriptionId: string | null;
}

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
  const [p] = await tx<{ id: number }[]>`
    insert into purchases (checkout_session_id, mode, plan, email, customer_id, subscription_id)
    values (${s.sessionId}, ${s.mode}, ${s.plan}, ${s.email}, ${s.customerId}, ${s.subscriptionId})
    on conflict (checkout_session_id) do nothing
    returning id`;
  if (!p) return false;
  const days = s.mode === 'payment' ? PASS_DAYS : null;
  const label = s.mode === 'payment' ? 'Stripe 30-day pass' : 'Stripe subscription';
  const { key, row } = await createApiKey(tx, { plan: s.plan, label, email: s.email, days });
  await tx`
    update purchases set api_key_id = ${row.id}, key_sealed = ${deps.sealer.seal(key, revealContext(s.sessionId))},
                         reveal_until = now() + make_interval(mins => ${REVEAL_WINDOW_MINUTES})
    where id = ${p.id}`;
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
  const [r] = await sql<{ key_sealed: Uint8Array; plan: PlanName; mode: 'subscription' | 'payment'; api_key_id: number | null }[]>`
    with taken as (
      select id, key_sealed from purchases
      where checkout_session_id = ${sessionId} and key_sealed is not null and reveal_until > now()
      for update
    )
    update purchases p set key_sealed = null from taken where p.id = taken.id
    returning taken.key_sealed, p.plan, p.mode, p.api_key_id`;
  if (r) {
    const [k] = await sql<{ expires_at: Date | null }[]>`select expires_at from api_keys where id = ${r.api_key_id}`;
    const key = sealer.open(r.key_sealed, revealContext(sessionId));
    return { kind: 'key', key, plan: r.plan, mode: r.mode, expiresAt: k?.expires_at ?? null };
  }
  const [exists] = await sql`select 1 from purchases where checkout_session_id = ${sessionId}`;
  return exists ? { kind: 'gone' } : { kind: 'pending' };
}

interface SubRow {
  id: number;
  api_key_id: number | null;
  status: 'active' | 'past_due' | 'canceled';
  plan: PlanName;
}

/**
 * Applies one subscription event to the purchase and its key, in the caller's transaction. Events
 * older than the last one applied are ignored (Stripe does not order deliveries), and `canceled` is final.
 */
export async function applySubscriptionState(
  tx: Sql,
  o: { subscriptionId: string; eventAt: Date; state: 'active' | 'past_due' | 'canceled' | 'paused'; plan?: PlanName | null },
): Promise<'applied' | 'ignored' | 'no-purchase'> {
  const [p] = await tx<SubRow[]>`
    select id, api_key_id, status, plan from purchases
    where subscription_id = ${o.subscriptionId} and (state_event_at is null or state_event_at <= ${o.eventAt})
    for update`;
  if (!p) {
    const [any] = await tx`select 1 from purchases where subscription_id = ${o.subscriptionId}`;
    return any ? 'ignored' : 'no-purchase';
  }
  if (p.status === 'canceled') return 'ignored';
  if (o.plan && o.plan !== p.plan) {
    await tx`update purchases set plan = ${o.plan} where id = ${p.id}`;
    if (p.api_key_id !== null) await tx`update api_keys set plan = ${o.plan} where id = ${p.api_key_id}`;
  }
  const status = o.state === 'paused' ? 'past_due' : o.state;
  await tx`update purchases set status = ${status}, state_event_at = ${o.eventAt} where id = ${p.id}`;
  if (p.api_key_id === null) return 'applied';
  if (o.state === 'active') {
    await tx`update api_keys set expires_at = null where id = ${p.api_key_id}`;
  } else if (o.state === 'past_due') {
    // The grace period starts at the first failure and is never extended by later ones.
    await tx`update api_keys set expires_at = now() + make_interval(days => ${GRACE_DAYS})
             where id = ${p.api_key_id} and expires_at is null`;
  } else {
    await tx`update api_keys set expires_at = now() where id = ${p.api_key_id} and (expires_at is null or expires_at > now())`;
  }
  return 'applied';
}

/** The customer whose billing portal an address opens: its newest live subscription, else its newest purchase. */
export async function customerForEmail(sql: Sql, email: string): Promise<string | null> {
  const [r] = await sql<{ customer_id: string }[]>`
    select customer_id from purchases
    where lower(email) = lower(${email}) and customer_id is not null
    order by (mode = 'subscription' and status <> 'canceled') desc, id desc
    limit 1`;
  return r?.customer_id ?? null;
}

/** Drops sealed keys whose reveal hour has passed (the reveal query also refuses them). */
export async function purgeExpiredReveals(sql: Sql): Promise<number> {
  const rows = await sql`update purchases set key_sealed = null where key_sealed is not null and reveal_until <= now() returning id`;
  return rows.length;
}
