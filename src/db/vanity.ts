import type { Sql } from './sql.ts';
import { ACTIVE_BUNDLE, EXPIRED_BUNDLE, lockForChange, type ChangeCheck } from './bundle-room.ts';
import { AppError } from '../errors.ts';

/** How long a freed name stays its last key's (sql/0018_vanity_holds.sql). */
export const VANITY_HOLD_DAYS = 30;

/** A held name's refusal: the same 409 as a taken one, saying why. */
const held = (): AppError => new AppError('VANITY_TAKEN', `vanity was in use until recently and stays its previous owner's for ${VANITY_HOLD_DAYS} days`);

/** Whether a key other than `keyId` holds the name freed within the last 30 days (`tx`: a transaction or not). */
async function heldForAnother(sql: Sql, name: string, keyId: number | null): Promise<boolean> {
  const [r] = await sql<{ n: number }[]>`
    select count(*)::int as n from vanity_holds
    where name = lower(${name}) and held_until > now() and api_key_id is distinct from ${keyId}`;
  return r!.n > 0;
}

/**
 * Throws VANITY_TAKEN unless key `keyId` could name a bundle `name`: no live bundle holds it and no
 * other key let go of it within 30 days (a cheap refusal before storing files; claimVanity decides).
 */
export async function checkVanityFree(sql: Sql, name: string, keyId: number | null): Promise<void> {
  const [r] = await sql<{ n: number }[]>`
    select count(*)::int as n from bundles b where lower(b.vanity) = lower(${name}) and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  if (r!.n > 0) throw new AppError('VANITY_TAKEN');
  if (await heldForAnother(sql, name, keyId)) throw held();
}

/**
 * Gives bundle `bundleId` the name, if `check` allows, in one transaction: an expired bundle still
 * holding it (not yet swept) lets it go, a name another key let go of within 30 days is refused,
 * then the unique index on lower(vanity) decides between racing claims, so exactly one wins and the
 * others get VANITY_TAKEN. False when the bundle is gone.
 */
export async function claimVanity(sql: Sql, bundleId: number, name: string, check: ChangeCheck): Promise<boolean> {
  try {
    return await sql.begin(async (tx) => {
      const b = await lockForChange(tx as unknown as Sql, bundleId, check);
      if (!b) return false;
      await tx`update bundles b set vanity = null
               where lower(b.vanity) = lower(${name}) and b.id <> ${bundleId} and ${tx.unsafe(EXPIRED_BUNDLE)}`;
      // (after the line above: an expired bundle of another key that let go of it just now holds it too)
      if (await heldForAnother(tx as unknown as Sql, name, b.api_key_id)) throw held();
      const rows = await tx`update bundles b set vanity = ${name} where b.id = ${bundleId} and ${tx.unsafe(ACTIVE_BUNDLE)} returning b.id`;
      if (rows.length === 0) return false;
      // Serving again: a hold starts anew when this bundle lets go of it.
      await tx`delete from vanity_holds where name = lower(${name})`;
      return true;
    });
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw new AppError('VANITY_TAKEN');
    throw err;
  }
}

/** Takes bundle `bundleId`'s name away, if `check` allows. */
export async function releaseVanity(sql: Sql, bundleId: number, check: ChangeCheck): Promise<void> {
  await sql.begin(async (tx) => {
    if (!(await lockForChange(tx as unknown as Sql, bundleId, check))) return;
    await tx`update bundles set vanity = null where id = ${bundleId} and vanity is not null`;
  });
}

/** The short code of the live bundle holding `name` as its vanity name (any case). */
export async function codeOfVanity(sql: Sql, name: string): Promise<string | undefined> {
  const [b] = await sql<{ short_code: string }[]>`
    select b.short_code from bundles b where lower(b.vanity) = lower(${name}) and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  return b?.short_code;
}

/** Bundle `code` when key `keyId` owns it and it is live. */
export async function findOwnedLiveBundle(sql: Sql, code: string, keyId: number): Promise<{ id: number; short_code: string } | undefined> {
  const [b] = await sql<{ id: number; short_code: string }[]>`
    select b.id, b.short_code from bundles b
    where b.short_code = ${code} and b.api_key_id = ${keyId} and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  return b;
}
