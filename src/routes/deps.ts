import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Sql } from '../db/client.ts';
import type { FileRow } from '../db/bundles.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import type { Ctx } from '../http/context.ts';
import type { UwsBinding } from '../http/uws.ts';
import type { ApiKeyRow } from '../db/api-keys.ts';
import type { Signer } from '../auth/signing.ts';
import type { RateStore } from '../state/rate-store.ts';
import type { Metrics } from '../metrics.ts';
import type { UploadLocks } from '../db/upload-locks.ts';
import type { DownloadNotifier } from '../notify/downloads.ts';
import type { BundleCache } from '../state/bundle-cache.ts';
import type { BundleWriter } from '../db/bundle-writer.ts';
import type { BatchedCounts, DownloadCounts } from '../db/download-counts.ts';
import type { OriginOf } from '../http/origin.ts';
import type { FastPaths } from '../ingest/fast-paths.ts';
import type { ArrivalNotifier } from '../notify/arrivals.ts';

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

/** What every route module is given; nothing is imported as a singleton. */
export interface Deps {
  readonly config: Config;
  readonly log: Logger;
  readonly sql: Sql;
  /** Keeps writers of one tus upload apart across processes and nodes. */
  readonly uploadLocks: UploadLocks;
  /** File bytes at rest: every read, write and delete of them goes through it. */
  readonly blobs: BlobStore;
  readonly access: Access;
  /** The origin links in an answer name: BASE_URL, else the one the request came to. */
  readonly origin: OriginOf;
  readonly passwords: Passwords;
  readonly signer: Signer;
  /** Shared counters (rate limits, password attempts): Redis or in-process. */
  readonly store: RateStore;
  readonly binding: UwsBinding;
  /** Which multipart shortcuts the installed busboy and streamsearch allow (see ingest/fast-paths.ts). */
  readonly fastPaths: FastPaths;
  readonly dbKind: 'postgres' | 'embedded';
  /** Active bundles with their files, by short code (bundle info, status, share page). */
  readonly bundles: BundleCache;
  /** New bundles with their files, committed in groups (see db/bundle-writer.ts). */
  readonly newBundles: BundleWriter;
  /** Absent in tests that build route tables without a server. */
  readonly metrics?: Metrics;
  /** notify_email: finished downloads are recorded here. Absent in tests that build route tables. */
  readonly downloads?: DownloadNotifier;
  /** download_count, batched. Absent in tests that build route tables. */
  readonly downloadCounts?: DownloadCounts;
  /** bundles' view_count (share-page views), batched. Absent in tests that build route tables. */
  readonly viewCounts?: BatchedCounts;
  /** Names a vanity URL may not take: every first path segment served, plus a fixed list (sharing/vanity.ts). */
  readonly reservedNames: ReadonlySet<string>;
  /** Files arriving through upload requests are mailed here. Absent in tests that build route tables. */
  readonly arrivals?: ArrivalNotifier;
}

export const fileJson = (f: FileRow): Record<string, unknown> => ({
  id: f.id,
  name: f.name,
  size: f.size,
  mime_type: f.mime_type,
  download_url: `/api/v1/download/${f.id}`,
});
