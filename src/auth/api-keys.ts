import { randomBytes } from 'node:crypto';
import type { Sql } from '../db/client.ts';
import { hashSecret, secretMatches } from './tokens.ts';
import type { PlanName } from './plans.ts';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/**
 * `sk_` + 43 base62 characters (~256 bits): never 64-hex, so never mistaken for an upload token. The
 * 12-character prefix that identifies a key carries 9 random characters (62^9), and is unique.
 */
export const KEY_RE = /^sk_[A-Za-z0-9]{43}$/;

export function newApiKey(): string {
  let body = '';
  while (body.length < 43) for (const b of randomBytes(48)) if (b < 248 && body.length < 43) body += BASE62[b % 62];
  return `sk_${body}`;
}

export interface ApiKeyRow {
  id: number;
  key_hash: Uint8Array;
  prefix: string;
  label: string | null;
  plan: PlanName;
  revoked_at: Date | null;
  expires_at: Date | null;
  owner_email: string | null;
  created_at: Date;
  last_used_at: Date | null;
  state: 'active' | 'expired' | 'revoked';
}

const STATE = `case when k.revoked_at is not null then 'revoked'
                   when k.expires_at is not null and k.expires_at <= now() then 'expired'
                   else 'active' end as state`;

export async function createApiKey(
  sql: Sql,
  opts: { plan: PlanName; label?: string | null; email?: string | null; days?: number | null },
): Promise<{ key: string; row: ApiKeyRow }> {
  const expires = opts.days ? new Date(Date.now() + opts.days * 86_400_000) : null;
  for (let attempt = 0; ; attempt++) {
    const key = newApiKey();
    try {
      const [row] = await sql<ApiKeyRow[]>`
        insert into api_keys (key_hash, prefix, label, plan, owner_email, expires_at)
        values (${hashSecret(key)}, ${key.slice(0, 12)}, ${opts.label ?? null}, ${opts.plan}, ${opts.email ?? null}, ${expires})
        returning *, 'active' as state`;
      return { key, row: row! };
    } catch (err) {
      // A prefix collision (1 in 62^9 per pair) just draws another key.
      if ((err as { code?: string }).code !== '23505' || attempt >= 5) throw err;
    }
  }
}

/** Looks a presented key up by its hash (an index probe; the hash comparison is constant-time). */
export async function findApiKey(sql: Sql, key: string): Promise<ApiKeyRow | undefined> {
  if (!KEY_RE.test(key)) return undefined;
  const [row] = await sql<ApiKeyRow[]>`select k.*, ${sql.unsafe(STATE)} from api_keys k where key_hash = ${hashSecret(key)}`;
  return row && secretMatches(key, row.key_hash) ? row : undefined;
}

/** Whether the key with this id is still active (neither revoked nor expired). */
export async function isKeyActive(sql: Sql, id: number): Promise<boolean> {
  const [row] = await sql`select 1 from api_keys where id = ${id} and revoked_at is null and (expires_at is null or expires_at > now())`;
  return row !== undefined;
}

export const listApiKeys = (sql: Sql): Promise<ApiKeyRow[]> =>
  sql<ApiKeyRow[]>`select k.*, ${sql.unsafe(STATE)} from api_keys k order by k.id`;

/** Revokes the key with exactly this (unique) prefix; returns whether one existed. */
export async function revokeApiKey(sql: Sql, prefix: string): Promise<boolean> {
  const rows = await sql`update api_keys set revoked_at = coalesce(revoked_at, now()) where prefix = ${prefix} returning id`;
  return rows.length === 1;
}

/** Records use at most once a minute per key, off the request's path. */
export function createUsageRecorder(sql: Sql, onError: (err: unknown) => void): (keyId: number) => void {
  const last = new Map<number, number>();
  return (keyId) => {
    const now = Date.now();
    if (now - (last.get(keyId) ?? 0) < 60_000) return;
    last.set(keyId, now);
    sql`update api_keys set last_used_at = now() where id = ${keyId} and (last_used_at is null or last_used_at < now() - interval '1 minute')`.catch(
      onError,
    );
  };
}
