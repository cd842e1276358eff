import type { Sql } from './client.ts';
import { ACTIVE_BUNDLE, EXPIRED_BUNDLE } from './bundle-room.ts';
import { AppError } from '../errors.ts';

/** True when no live bundle but `exceptBundle` holds the name (a cheap refusal before storing files). */
export async function vanityFree(sql: Sql, name: string, exceptBundle = 0): Promise<boolean> {
  const [r] = await sql<{ n: number }[]>`
    select count(*)::int as n from bundles b
    where lower(b.vanity) = lower(${name}) and b.id <> ${exceptBundle} and ${sql.unsafe(ACTIVE_BUNDLE)}`;
  return r!.n === 0;
}

/**
 * Gives bundle `bundleId` the name, in one transaction: an expired bundle still holding it (not yet
 * swept) lets it go, then the unique index on lower(vanity) decides between racing claims, so
 * exactly one wins and the others get VANITY_TAKEN. False when the bundle is gone or expired.
 */
export async function claimVanity(sql: Sql, bundleId: number, name: string): Promise<boolean> {
  try {
    return await sql.begin(async (tx) => {
      await tx`update bundles b set vanity = null
               where lower(b.vanity) = lower(${name}) and b.id <> ${bundleId} and ${tx.unsafe(EXPIRED_BUNDLE)}`;
      const rows = await tx`update bundles b set vanity = ${name} where b.id = ${bundleId} and ${tx.unsafe(ACTIVE_BUNDLE)} returning b.id`;
      return rows.length === 1;
    });
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw new AppError('VANITY_TAKEN');
    throw err;
  }
}

export async function releaseVanity(sql: Sql, bundleId: number): Promise<void> {
  await sql`update bundles set vanity = null where id = ${bundleId} and vanity is not null`;
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
