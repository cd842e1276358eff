import type { Sql } from './sql.ts';
import type { PlanName } from '../plans.ts';

// Purchases, portal tokens and the ids of Stripe events already applied.

export interface PurchaseInsert {
  readonly sessionId: string;
  readonly mode: 'subscription' | 'payment';
  readonly plan: PlanName;
  readonly email: string;
  readonly customerId: string | null;
  readonly subscriptionId: string | null;
}

/** The new purchase's id; undefined when this checkout session was recorded before. */
export async function insertPurchase(tx: Sql, s: PurchaseInsert): Promise<number | undefined> {
  const [p] = await tx<{ id: number }[]>`
    insert into purchases (checkout_session_id, mode, plan, email, customer_id, subscription_id)
    values (${s.sessionId}, ${s.mode}, ${s.plan}, ${s.email}, ${s.customerId}, ${s.subscriptionId})
    on conflict (checkout_session_id) do nothing
    returning id`;
  return p?.id;
}

export async function setPurchaseKey(tx: Sql, id: number, keyId: number, sealed: Uint8Array, revealMinutes: number): Promise<void> {
  await tx`
    update purchases set api_key_id = ${keyId}, key_sealed = ${sealed},
                         reveal_until = now() + make_interval(mins => ${revealMinutes})
    where id = ${id}`;
}

/** Takes the sealed key out of its row in one statement: of two concurrent takers exactly one sees it. */
export async function takeSealedKey(
  sql: Sql,
  sessionId: string,
): Promise<{ key_sealed: Uint8Array; plan: PlanName; mode: 'subscription' | 'payment'; api_key_id: number | null } | undefined> {
  const [r] = await sql<{ key_sealed: Uint8Array; plan: PlanName; mode: 'subscription' | 'payment'; api_key_id: number | null }[]>`
    with taken as (
      select id, key_sealed from purchases
      where checkout_session_id = ${sessionId} and key_sealed is not null and reveal_until > now()
      for update
    )
    update purchases p set key_sealed = null from taken where p.id = taken.id
    returning taken.key_sealed, p.plan, p.mode, p.api_key_id`;
  return r;
}

export async function keyExpiresAt(sql: Sql, keyId: number | null): Promise<Date | null> {
  const [k] = await sql<{ expires_at: Date | null }[]>`select expires_at from api_keys where id = ${keyId}`;
  return k?.expires_at ?? null;
}

export async function purchaseExists(sql: Sql, sessionId: string): Promise<boolean> {
  const [exists] = await sql`select 1 from purchases where checkout_session_id = ${sessionId}`;
  return exists !== undefined;
}

export interface SubRow {
  id: number;
  api_key_id: number | null;
  status: 'active' | 'past_due' | 'canceled';
  plan: PlanName;
}

/** Locks the subscription's purchase unless an event newer than `eventAt` was applied to it. */
export async function lockSubscriptionPurchase(tx: Sql, subscriptionId: string, eventAt: Date): Promise<SubRow | undefined> {
  const [p] = await tx<SubRow[]>`
    select id, api_key_id, status, plan from purchases
    where subscription_id = ${subscriptionId} and (state_event_at is null or state_event_at <= ${eventAt})
    for update`;
  return p;
}

export async function subscriptionPurchaseExists(tx: Sql, subscriptionId: string): Promise<boolean> {
  const [any] = await tx`select 1 from purchases where subscription_id = ${subscriptionId}`;
  return any !== undefined;
}

export async function setPurchasePlan(tx: Sql, p: SubRow, plan: PlanName): Promise<void> {
  await tx`update purchases set plan = ${plan} where id = ${p.id}`;
  if (p.api_key_id !== null) await tx`update api_keys set plan = ${plan} where id = ${p.api_key_id}`;
}

export async function setPurchaseStatus(tx: Sql, id: number, status: SubRow['status'], eventAt: Date): Promise<void> {
  await tx`update purchases set status = ${status}, state_event_at = ${eventAt} where id = ${id}`;
}

/**
 * A subscription key's expiry for its state: active never expires; past_due starts a grace of
 * `graceDays` at the first failure, never extended by later ones; canceled or paused expires now.
 */
export async function setSubscriptionKeyExpiry(
  tx: Sql,
  keyId: number,
  state: 'active' | 'past_due' | 'canceled' | 'paused',
  graceDays: number,
): Promise<void> {
  if (state === 'active') {
    await tx`update api_keys set expires_at = null where id = ${keyId}`;
  } else if (state === 'past_due') {
    await tx`update api_keys set expires_at = now() + make_interval(days => ${graceDays})
             where id = ${keyId} and expires_at is null`;
  } else {
    await tx`update api_keys set expires_at = now() where id = ${keyId} and (expires_at is null or expires_at > now())`;
  }
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

/** Unused, unexpired portal links of a customer. */
export async function livePortalTokens(sql: Sql, customer: string): Promise<number> {
  const [counted] = await sql<{ live: number }[]>`
    select count(*)::int as live from portal_tokens where customer_id = ${customer} and expires_at > now() and used_at is null`;
  return counted?.live ?? 0;
}

/** Records a portal token and runs `then` (which queues its mail) in the same transaction. */
export async function insertPortalToken(
  sql: Sql,
  hash: Uint8Array,
  customer: string,
  minutes: number,
  then: (tx: Sql) => Promise<void>,
): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`insert into portal_tokens (token_hash, customer_id, expires_at)
             values (${hash}, ${customer}, now() + make_interval(mins => ${minutes}))`;
    await then(tx as unknown as Sql);
  });
}

/** Spends a live portal token; its customer, or undefined. */
export async function usePortalToken(sql: Sql, hash: Uint8Array): Promise<string | undefined> {
  const [row] = await sql<{ customer_id: string }[]>`
    update portal_tokens set used_at = now()
    where token_hash = ${hash} and used_at is null and expires_at > now()
    returning customer_id`;
  return row?.customer_id;
}

export async function unusePortalToken(sql: Sql, hash: Uint8Array): Promise<void> {
  await sql`update portal_tokens set used_at = null where token_hash = ${hash}`;
}

/** Old portal tokens and old Stripe event ids (Stripe retries a delivery for up to three days; a month is plenty). */
export async function purgeBillingRows(sql: Sql): Promise<void> {
  await sql`delete from portal_tokens where expires_at < now() - interval '1 day'`;
  await sql`delete from stripe_events where received_at < now() - interval '30 days'`;
}

/**
 * Records Stripe event `id` and runs `apply` in the same transaction; false (and nothing run) when
 * it was recorded before. A concurrent duplicate waits on the unique index.
 */
export function onceForStripeEvent(sql: Sql, id: string, type: string, apply: (tx: Sql) => Promise<void>): Promise<boolean> {
  return sql.begin(async (txRaw) => {
    const tx = txRaw as unknown as Sql;
    const [fresh] = await tx`insert into stripe_events (id, type) values (${id}, ${type})
                             on conflict (id) do nothing returning id`;
    if (!fresh) return false;
    await apply(tx);
    return true;
  });
}
