// Who may use the operator console: one-time sign-in links minted by `sluice admin link`, and the
// 12-hour sessions they start. The session cookie is signed with SECRET (any node of a cluster
// checks it, and a cookie made under another SECRET is refused before the database is asked) and
// its secret part is stored only as a hash, so a revoked or expired session ends everywhere at once.
import { randomBytes } from 'node:crypto';
import type { Sql } from '../db/sql.ts';
import type { Signer } from './signing.ts';
import { hashSecret, secretMatches } from '../util/tokens.ts';
import { findAdminSession, insertAdminLink, peekAdminLink, redeemAdminLink, touchAdminSession } from '../db/admin-sessions.ts';

export const ADMIN_COOKIE = 'sluice_admin';
export const SESSION_HOURS = 12;
export const LINK_TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;
const COOKIE_RE = /^(\d{1,15})\.([A-Za-z0-9_-]{43})\.([A-Za-z0-9_-]{43})$/;

export interface AdminSession {
  readonly id: number;
  /** Whose session: the actions it takes are audited under this name. */
  readonly label: string;
  /** The token every console form carries (with same-site checks: CSRF). */
  readonly csrf: string;
}

export interface AdminAuth {
  /** A new one-time sign-in token, valid `minutes`. */
  mintLink(label: string, minutes: number): Promise<string>;
  /** The label of a usable link, without using it. */
  linkLabel(token: string): Promise<string | null>;
  /** Uses the link: the cookie value of the new session, or null (unknown, used, expired). */
  signIn(token: string): Promise<string | null>;
  /** The session a request's Cookie header carries, if it is valid now. */
  sessionOf(cookieHeader: string | undefined): Promise<AdminSession | null>;
  csrfMatches(s: AdminSession, presented: unknown): boolean;
}

const b64 = (b: Buffer): string => b.toString('base64url');

/** The value of cookie `name` in a Cookie header. */
export function cookieValue(header: string | undefined, name: string): string | null {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

export function createAdminAuth(o: { sql: Sql; signer: Signer }): AdminAuth {
  return {
    async mintLink(label, minutes) {
      const token = b64(randomBytes(32));
      await insertAdminLink(o.sql, hashSecret(token), label, new Date(Date.now() + minutes * 60_000));
      return token;
    },
    linkLabel: (token) => (LINK_TOKEN_RE.test(token) ? peekAdminLink(o.sql, hashSecret(token)) : Promise.resolve(null)),
    async signIn(token) {
      if (!LINK_TOKEN_RE.test(token)) return null;
      const secretPart = b64(randomBytes(32));
      const s = await redeemAdminLink(o.sql, hashSecret(token), hashSecret(secretPart), SESSION_HOURS);
      return s ? `${s.id}.${secretPart}.${o.signer.adminSession(s.id, secretPart)}` : null;
    },
    async sessionOf(header) {
      const m = COOKIE_RE.exec(cookieValue(header, ADMIN_COOKIE) ?? '');
      if (!m) return null;
      const id = Number(m[1]);
      if (!o.signer.verifyAdminSession(id, m[2]!, m[3]!)) return null;
      const row = await findAdminSession(o.sql, id);
      if (!row || row.revoked_at !== null || row.expires_at.getTime() <= Date.now() || !secretMatches(m[2]!, row.secret_hash)) return null;
      await touchAdminSession(o.sql, id);
      return { id, label: row.label, csrf: o.signer.adminCsrf(id) };
    },
    csrfMatches: (s, presented) => o.signer.verifyAdminCsrf(s.id, presented),
  };
}
