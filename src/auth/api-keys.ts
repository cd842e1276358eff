import { randomBytes } from 'node:crypto';
import type { Sql } from '../db/sql.ts';
import { hashSecret, secretMatches } from '../util/tokens.ts';
import type { PlanName } from '../plans.ts';
import { apiKeyByHash, insertApiKey, isMintFormTaken, touchKeyUsed, type ApiKeyRow } from '../db/api-keys.ts';

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

/**
 * Mints a key. `within`, when given, runs in the insert's transaction (an audit record commits with
 * the key, or neither does). `form` names the console form it comes from: a second key for the same
 * form is refused with the unique violation that isMintFormTaken recognises.
 */
export async function createApiKey(
  sql: Sql,
  opts: { plan: PlanName; label?: string | null; email?: string | null; days?: number | null; form?: string | null },
  within?: (tx: Sql, row: ApiKeyRow) => Promise<void>,
): Promise<{ key: string; row: ApiKeyRow }> {
  const expires = opts.days ? new Date(Date.now() + opts.days * 86_400_000) : null;
  for (let attempt = 0; ; attempt++) {
    const key = newApiKey();
    const insert = (q: Sql): Promise<ApiKeyRow> =>
      insertApiKey(q, { hash: hashSecret(key), prefix: key.slice(0, 12), label: opts.label ?? null, plan: opts.plan, email: opts.email ?? null, expires, form: opts.form ?? null });
    try {
      const row = within
        ? await (sql.begin(async (tx) => {
            const r = await insert(tx as unknown as Sql);
            await within(tx as unknown as Sql, r);
            return r;
          }) as Promise<ApiKeyRow>)
        : await insert(sql);
      return { key, row };
    } catch (err) {
      // A prefix collision (1 in 62^9 per pair) just draws another key.
      if ((err as { code?: string }).code !== '23505' || isMintFormTaken(err) || attempt >= 5) throw err;
    }
  }
}

/** Looks a presented key up by its hash (an index probe; the hash comparison is constant-time). */
export async function findApiKey(sql: Sql, key: string): Promise<ApiKeyRow | undefined> {
  if (!KEY_RE.test(key)) return undefined;
  const row = await apiKeyByHash(sql, hashSecret(key));
  return row && secretMatches(key, row.key_hash) ? row : undefined;
}

/** Records use at most once a minute per key, off the request's path. */
export function createUsageRecorder(sql: Sql, onError: (err: unknown) => void): (keyId: number) => void {
  const last = new Map<number, number>();
  return (keyId) => {
    const now = Date.now();
    if (now - (last.get(keyId) ?? 0) < 60_000) return;
    last.set(keyId, now);
    touchKeyUsed(sql, keyId).catch(onError);
  };
}
