import type { Sql } from './sql.ts';
import type { BundleRow } from './rows.ts';

/**
 * The one definition of an active bundle, for a query that names the bundle `b`: not expired (no
 * expiry means never), or quarantined (a held bundle does not expire: its files are evidence; every
 * lookup answers it 451, see db/quarantine.ts). A deleted bundle has no row. Every query that serves, appends to or sweeps
 * bundles says "active" or "expired" through these two, on both database backends (plain SQL text,
 * spliced with `sql.unsafe`).
 */
export const ACTIVE_BUNDLE = '(b.expires_at is null or b.expires_at > now() or b.quarantined_at is not null)';
export const EXPIRED_BUNDLE = `(not ${ACTIVE_BUNDLE})`;

/** A bundle row as `b`, with whether it has expired. */
export const BUNDLE_COLS = `b.*, ${EXPIRED_BUNDLE} as is_expired`;

/**
 * The bytes unfinished tus uploads hold in bundle `b` (the query's alias): each its declared
 * length, or, while its length is deferred, what it received or what its PATCH in progress reserved
 * (db/tus-uploads.ts reserveAhead), whichever is more. `except` leaves one upload out (the one
 * completing, or reserving). Appends of either kind count this room as taken, so a declared length holds.
 */
export const tusReserved = (sql: Sql, except: string | null = null) => sql`
  coalesce((select sum(coalesce(t.upload_length, greatest(t.upload_offset, t.reserved_bytes))) from tus_uploads t
            where t.bundle_id = b.id and t.completed_at is null and t.expires_at > now()
              and t.id is distinct from ${except}), 0)::bigint`;

/**
 * What decides whether a bundle may change, besides its own row: the state of the upload request it
 * was made for (null: none) and of the key that owns it (null: anonymous). bundles/guard.ts reads it.
 */
export interface ChangeState {
  readonly quarantined_at: Date | null;
  readonly is_expired: boolean;
  /** Whether its upload request still takes files (open, unexpired); null for a bundle of no request. */
  readonly request_open: boolean | null;
  /** Whether its owner key is neither revoked nor expired; null for an anonymous bundle. */
  readonly owner_active: boolean | null;
}

/** A check a change runs on the bundle's state under its row lock: it throws to refuse. */
export type ChangeCheck = (state: ChangeState) => void;

/** The ChangeState columns of bundle `b` beyond its own row. */
const CHANGE_COLS = `
  (select r.closed_at is null and r.expires_at > now() from upload_requests r where r.bundle_id = b.id) as request_open,
  (select k.revoked_at is null and (k.expires_at is null or k.expires_at > now()) from api_keys k where k.id = b.api_key_id) as owner_active`;

export type LockedBundle = BundleRow & ChangeState & { reserved: number };

/**
 * Locks bundle `bundleId` for the rest of transaction `tx`, reads it with its change state and what
 * tus uploads reserve in it, and runs `check` on it: every change to a bundle or its files commits
 * through here, so the guard sees the state no concurrent change can alter before the commit.
 * Two statements on purpose: under READ COMMITTED a statement sees the rows committed when it
 * began, so a reservation subquery inside the locking `select … for update` would miss the upload a
 * concurrent creation committed while this one waited for the lock. Undefined: no such bundle.
 */
export async function lockForChange(tx: Sql, bundleId: number, check: ChangeCheck, exceptTus: string | null = null): Promise<LockedBundle | undefined> {
  const [locked] = await tx`select id from bundles where id = ${bundleId} for update`;
  if (!locked) return undefined;
  const [b] = await tx<Array<BundleRow & ChangeState & { reserved: string }>>`
    select ${tx.unsafe(BUNDLE_COLS)}, ${tx.unsafe(CHANGE_COLS)}, ${tusReserved(tx, exceptTus)} as reserved from bundles b where id = ${bundleId}`;
  if (!b) return undefined;
  check(b);
  return { ...b, reserved: Number(b.reserved) };
}

/**
 * Bundle `bundleId`'s change state without a lock, with the room left for appends (`exceptTus`
 * left out): a request's early refusal, before its body is read. The commit checks again.
 */
export async function changeState(sql: Sql, bundleId: number, exceptTus: string | null = null): Promise<(ChangeState & { room: number }) | undefined> {
  const [b] = await sql<Array<ChangeState & { room: string }>>`
    select b.quarantined_at, ${sql.unsafe(EXPIRED_BUNDLE)} as is_expired, ${sql.unsafe(CHANGE_COLS)},
           (b.max_size_bytes - b.total_size_bytes - ${tusReserved(sql, exceptTus)})::bigint as room
    from bundles b where id = ${bundleId}`;
  return b && { ...b, room: Number(b.room) };
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
