import type { Sql } from './client.ts';
import type { BundleRow } from './bundles.ts';

/**
 * The one definition of an active bundle, for a query that names the bundle `b`: not expired (no
 * expiry means never), or quarantined (a held bundle does not expire: its files are evidence; every
 * lookup answers it 451, see abuse/quarantine.ts). A deleted bundle has no row. Every query that serves, appends to or sweeps
 * bundles says "active" or "expired" through these two, on both database backends (plain SQL text,
 * spliced with `sql.unsafe`).
 */
export const ACTIVE_BUNDLE = '(b.expires_at is null or b.expires_at > now() or b.quarantined_at is not null)';
export const EXPIRED_BUNDLE = `(not ${ACTIVE_BUNDLE})`;

/** A bundle row as `b`, with whether it has expired. */
export const BUNDLE_COLS = `b.*, ${EXPIRED_BUNDLE} as is_expired`;

/**
 * The bytes unfinished tus uploads hold in bundle `b` (the query's alias): each its declared
 * length, or what it received while its length is deferred. `except` leaves one upload out (the
 * one completing). Appends of either kind count this room as taken, so a declared length holds.
 */
export const tusReserved = (sql: Sql, except: string | null = null) => sql`
  coalesce((select sum(coalesce(t.upload_length, t.upload_offset)) from tus_uploads t
            where t.bundle_id = b.id and t.completed_at is null and t.expires_at > now()
              and t.id is distinct from ${except}), 0)::bigint`;

/**
 * Locks bundle `bundleId` for the rest of transaction `tx`, then reads it with what tus uploads
 * reserve in it. Two statements on purpose: under READ COMMITTED a statement sees the rows
 * committed when it began, so a reservation subquery inside the locking `select … for update`
 * would miss the upload a concurrent creation committed while this one waited for the lock.
 */
export async function lockWithReserved(
  tx: Sql,
  bundleId: number,
  exceptTus: string | null = null,
): Promise<(BundleRow & { reserved: number }) | undefined> {
  const [locked] = await tx`select id from bundles where id = ${bundleId} for update`;
  if (!locked) return undefined;
  const [b] = await tx<Array<BundleRow & { reserved: string }>>`
    select ${tx.unsafe(BUNDLE_COLS)}, ${tusReserved(tx, exceptTus)} as reserved from bundles b where id = ${bundleId}`;
  return b && { ...b, reserved: Number(b.reserved) };
}

/**
 * Room left in a bundle for appends: its cap minus what it holds and what tus uploads reserved
 * (none for a bundle gone or expired, which `expired` tells).
 */
export async function bundleRoom(sql: Sql, bundleId: number, exceptTus: string | null = null): Promise<{ room: number; expired: boolean }> {
  const [r] = await sql<Array<{ room: number; expired: boolean }>>`
    select (b.max_size_bytes - b.total_size_bytes - ${tusReserved(sql, exceptTus)})::bigint as room,
           ${sql.unsafe(EXPIRED_BUNDLE)} as expired
    from bundles b where b.id = ${bundleId}`;
  return r === undefined || r.expired ? { room: 0, expired: true } : { room: Number(r.room), expired: false };
}
