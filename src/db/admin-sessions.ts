import type { Sql } from './sql.ts';

export interface AdminSessionRow {
  id: number;
  label: string;
  secret_hash: Buffer;
  created_at: Date;
  expires_at: Date;
  revoked_at: Date | null;
  last_seen_at: Date | null;
}

export async function insertAdminLink(sql: Sql, tokenHash: Buffer, label: string, expiresAt: Date): Promise<void> {
  await sql`insert into admin_links (token_hash, label, expires_at) values (${tokenHash}, ${label}, ${expiresAt})`;
}

/** The label of a link that is still unused and unexpired (the sign-in page), without using it. */
export async function peekAdminLink(sql: Sql, tokenHash: Buffer): Promise<string | null> {
  const [row] = await sql<{ label: string }[]>`
    select label from admin_links where token_hash = ${tokenHash} and used_at is null and expires_at > now()`;
  return row?.label ?? null;
}

/**
 * Uses a link and starts its session, in one transaction: a link starts one session at most, however
 * many nodes are asked at once. Null when the link is unknown, used or expired.
 */
export async function redeemAdminLink(sql: Sql, tokenHash: Buffer, secretHash: Buffer, hours: number): Promise<{ id: number; label: string } | null> {
  return (await sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const [link] = await t<{ label: string }[]>`
      update admin_links set used_at = now()
      where token_hash = ${tokenHash} and used_at is null and expires_at > now()
      returning label`;
    if (!link) return null;
    const [s] = await t<{ id: string }[]>`
      insert into admin_sessions (secret_hash, label, expires_at)
      values (${secretHash}, ${link.label}, now() + make_interval(hours => ${hours}))
      returning id`;
    return { id: Number(s!.id), label: link.label };
  })) as { id: number; label: string } | null;
}

export async function findAdminSession(sql: Sql, id: number): Promise<AdminSessionRow | undefined> {
  const [row] = await sql<(AdminSessionRow & { id: string })[]>`
    select id, label, secret_hash, created_at, expires_at, revoked_at, last_seen_at from admin_sessions where id = ${id}`;
  return row ? { ...row, id: Number(row.id) } : undefined;
}

/** Marks a session seen, at most once a minute (a page load is not worth a write each). */
export async function touchAdminSession(sql: Sql, id: number): Promise<void> {
  await sql`update admin_sessions set last_seen_at = now()
            where id = ${id} and (last_seen_at is null or last_seen_at < now() - interval '1 minute')`;
}

export async function listAdminSessions(sql: Sql): Promise<AdminSessionRow[]> {
  const rows = await sql<(AdminSessionRow & { id: string })[]>`
    select id, label, secret_hash, created_at, expires_at, revoked_at, last_seen_at from admin_sessions
    where revoked_at is null and expires_at > now() order by id`;
  return rows.map((r) => ({ ...r, id: Number(r.id) }));
}

/** Ends one session (or every live one with `id` null); how many it ended. */
export async function revokeAdminSessions(sql: Sql, id: number | null): Promise<number> {
  const rows = id === null
    ? await sql`update admin_sessions set revoked_at = now() where revoked_at is null and expires_at > now() returning id`
    : await sql`update admin_sessions set revoked_at = now() where id = ${id} and revoked_at is null returning id`;
  return rows.length;
}
