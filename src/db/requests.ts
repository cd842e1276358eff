import type { Sql } from './sql.ts';
import { newShortCode } from '../util/tokens.ts';

export interface RequestRow {
  id: number;
  token_hash: Uint8Array;
  prefix: string;
  api_key_id: number;
  bundle_id: number;
  label: string | null;
  max_bytes: number;
  max_files: number;
  created_at: Date;
  expires_at: Date;
  closed_at: Date | null;
}

/** An open request with what uploads into it need: its bundle and the owner key's state. */
export interface OpenRequest extends RequestRow {
  short_code: string;
  notify_email: string | null;
  file_count: number;
  total_size_bytes: number;
}

export interface NewRequest {
  tokenHash: Buffer;
  prefix: string;
  apiKeyId: number;
  label: string | null;
  maxBytes: number;
  maxFiles: number;
  expiresAt: Date;
  /** The bundle's own expiry; null: never. */
  bundleExpiresAt: Date | null;
  /** A hash of a password nobody is told: the bundle opens only to its owner's key. */
  lockHash: string;
  uploadTokenHash: Buffer;
}

/** Creates the request and its empty bundle in one transaction (a taken short code is drawn again). */
export async function insertRequest(sql: Sql, r: NewRequest): Promise<RequestRow> {
  return sql.begin(async (tx) => {
    for (;;) {
      const [b] = await tx<{ id: number }[]>`
        insert into bundles (short_code, upload_token_hash, access_password_hash, api_key_id, max_size_bytes, expires_at)
        values (${newShortCode()}, ${r.uploadTokenHash}, ${r.lockHash}, ${r.apiKeyId}, ${r.maxBytes}, ${r.bundleExpiresAt})
        on conflict (short_code) do nothing returning id`;
      if (!b) continue;
      const [row] = await tx<RequestRow[]>`
        insert into upload_requests (token_hash, prefix, api_key_id, bundle_id, label, max_bytes, max_files, expires_at)
        values (${r.tokenHash}, ${r.prefix}, ${r.apiKeyId}, ${b.id}, ${r.label}, ${r.maxBytes}, ${r.maxFiles}, ${r.expiresAt})
        returning *`;
      return row!;
    }
  }) as Promise<RequestRow>;
}

/**
 * The open request with this token hash: not closed, not expired, its bundle live and its key
 * neither revoked nor expired.
 */
export async function findOpenRequest(sql: Sql, tokenHash: Buffer): Promise<OpenRequest | undefined> {
  const [r] = await sql<OpenRequest[]>`
    select r.*, b.short_code, b.file_count, b.total_size_bytes, k.owner_email as notify_email
    from upload_requests r
    join bundles b on b.id = r.bundle_id and (b.expires_at is null or b.expires_at > now())
    join api_keys k on k.id = r.api_key_id and k.revoked_at is null and (k.expires_at is null or k.expires_at > now())
    where r.token_hash = ${tokenHash} and r.closed_at is null and r.expires_at > now()`;
  return r;
}

export interface ListedRequest extends RequestRow {
  short_code: string;
  file_count: number;
  total_size_bytes: number;
}

export const listRequests = (sql: Sql, apiKeyId: number): Promise<ListedRequest[]> =>
  sql<ListedRequest[]>`
    select r.*, b.short_code, b.file_count, b.total_size_bytes
    from upload_requests r join bundles b on b.id = r.bundle_id
    where r.api_key_id = ${apiKeyId} order by r.created_at desc, r.id desc limit 100`;

/** The request whose bundle this is (uploads into it obey its file limit and tell its key's e-mail). */
export async function requestOfBundle(sql: Sql, bundleId: number): Promise<{ id: number; max_files: number; notify_email: string | null } | undefined> {
  const [r] = await sql<{ id: number; max_files: number; notify_email: string | null }[]>`
    select r.id, r.max_files, k.owner_email as notify_email
    from upload_requests r join api_keys k on k.id = r.api_key_id where r.bundle_id = ${bundleId}`;
  return r;
}

/** Closes the key's request with this token hash; false when there is none open. */
export async function closeRequest(sql: Sql, apiKeyId: number, tokenHash: Buffer): Promise<boolean> {
  const rows = await sql`
    update upload_requests set closed_at = now()
    where token_hash = ${tokenHash} and api_key_id = ${apiKeyId} and closed_at is null returning id`;
  return rows.length === 1;
}
