import type { Sql } from './sql.ts';
import type { PlanName } from '../plans.ts';

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

/** SQL: the key (the table aliased `k`) is still active, neither revoked nor expired. */
export const KEY_ACTIVE = 'k.revoked_at is null and (k.expires_at is null or k.expires_at > now())';

/** A key's state as `keys list` shows it (the table is aliased `k`). */
export const KEY_STATE = `case when k.revoked_at is not null then 'revoked'
                   when k.expires_at is not null and k.expires_at <= now() then 'expired'
                   else 'active' end as state`;

/** Inserts a key by its hash and 12-character prefix (unique: a collision throws 23505). */
export async function insertApiKey(
  sql: Sql,
  k: { hash: Uint8Array; prefix: string; label: string | null; plan: PlanName; email: string | null; expires: Date | null; form: string | null },
): Promise<ApiKeyRow> {
  const [row] = await sql<ApiKeyRow[]>`
    insert into api_keys (key_hash, prefix, label, plan, owner_email, expires_at, mint_form)
    values (${k.hash}, ${k.prefix}, ${k.label}, ${k.plan}, ${k.email}, ${k.expires}, ${k.form})
    returning *, 'active' as state`;
  return row!;
}

/** The key a console mint form already made (see sql/0027_key_mint_forms.sql), if any. */
export async function apiKeyByMintForm(sql: Sql, form: string): Promise<ApiKeyRow | undefined> {
  const [row] = await sql<ApiKeyRow[]>`select k.*, ${sql.unsafe(KEY_STATE)} from api_keys k where mint_form = ${form}`;
  return row;
}

/** The error of an insert whose mint form already made a key. */
export const isMintFormTaken = (err: unknown): boolean =>
  (err as { code?: string }).code === '23505' && (err as { constraint_name?: string }).constraint_name === 'api_keys_mint_form_key';

export async function apiKeyByHash(sql: Sql, hash: Uint8Array): Promise<ApiKeyRow | undefined> {
  const [row] = await sql<ApiKeyRow[]>`select k.*, ${sql.unsafe(KEY_STATE)} from api_keys k where key_hash = ${hash}`;
  return row;
}

export const listApiKeys = (sql: Sql): Promise<ApiKeyRow[]> =>
  sql<ApiKeyRow[]>`select k.*, ${sql.unsafe(KEY_STATE)} from api_keys k order by k.id`;

/** Stamps a key's last use, at most once a minute in the database too (several processes may record it). */
export async function touchKeyUsed(sql: Sql, keyId: number): Promise<void> {
  await sql`update api_keys set last_used_at = now() where id = ${keyId} and (last_used_at is null or last_used_at < now() - interval '1 minute')`;
}
