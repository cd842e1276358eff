import type { ApiKeyRow } from '../db/api-keys.ts';
import type { Ctx } from '../http/context.ts';

/** Limits that apply to one uploader: anonymous, or the plan of a Bearer key. */
export interface Uploader {
  readonly apiKeyId: number | null;
  readonly maxBundleBytes: number;
  /** null: bundles never expire. */
  readonly expiryDays: number | null;
}

/** The resolved caller of one request. */
export interface Caller {
  /** The client's address as budgets and access tokens see it (an IPv6 client as its /64). */
  readonly ip: string;
  readonly uploader: Uploader;
  /** The active API key sent as Bearer, if any. */
  readonly apiKey: ApiKeyRow | null;
  /** A Bearer value was sent that is not an active API key (401 on uploads and /my/*). */
  readonly bearerRejected: boolean;
}

export interface Access {
  /**
   * Client address (X-Forwarded-For only from TRUST_PROXY peers) as budgets and access tokens see
   * it: IPv4 as is (IPv4-mapped IPv6 included), IPv6 as its /64 (`2001:db8:1:2::/64`).
   */
  ipOf(ctx: Ctx): string;
  /** Resolves the caller and spends one request of its hourly budget; throws RATE_LIMITED. */
  admit(ctx: Ctx): Promise<Caller>;
  /**
   * Resolves the caller and counts the request against `scope`'s own bound (at most `bound` in
   * `windowMs`; RATE_LIMITED past it) instead of the hourly budget, which the reply still states.
   */
  admitWithin(ctx: Ctx, scope: string, bound: number, windowMs: number): Promise<Caller>;
  /** The caller admitted for this request (`ctx.caller`); content paths resolve one without spending budget. */
  callerOf(ctx: Ctx): Promise<Caller>;
  /** Upload limits of the caller; throws INVALID_API_KEY for a rejected Bearer value. */
  uploaderFor(caller: Caller): Uploader;
  /** The caller's active key; throws INVALID_API_KEY (401) without one. */
  requireKey(caller: Caller): ApiKeyRow;
  /** The password gate: public, the owner's key, or a valid access token for this bundle and IP. */
  canRead(ctx: Ctx, caller: Caller, bundle: GatedBundle): boolean;
}

export interface GatedBundle {
  readonly id: number;
  readonly access_password_hash: string | null;
  readonly api_key_id: number | null;
}

export interface Passwords {
  hash(password: string): Promise<string>;
  verify(password: string, stored: string): Promise<boolean>;
}
