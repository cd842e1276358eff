import type { Logger } from 'pino';
import type { Config } from './config.ts';
import type { Sql } from './db/sql.ts';
import type { BlobStore } from './storage/blob-store.ts';
import type { UwsBinding } from './http/uws.ts';
import type { Signer } from './auth/signing.ts';
import type { AdminAuth } from './auth/admin-sessions.ts';
import type { HashQueue } from './abuse/hash-queue.ts';
import type { Sealer } from './util/sealer.ts';
import type { RateStore } from './state/rate-store.ts';
import type { Metrics } from './metrics/metrics.ts';
import type { UploadLocks } from './db/upload-locks.ts';
import type { DownloadNotifier } from './notify/downloads.ts';
import type { BundleCache } from './state/bundle-cache.ts';
import type { BundleWriter } from './db/bundle-writer.ts';
import type { BatchedCounts, DownloadCounts } from './db/download-counts.ts';
import type { OriginOf } from './http/origin.ts';
import type { FastPaths } from './ingest/fast-paths.ts';
import type { ArrivalNotifier } from './notify/arrivals.ts';
import type { Access, Passwords } from './auth/caller.ts';
import type { History } from './metrics/history.ts';

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
  /** The operator console's sign-in links and sessions. */
  readonly admin: AdminAuth;
  /** Files the console hashes on an operator's request, one at a time; closed at shutdown. */
  readonly consoleHashing: HashQueue;
  /** Seals webhook signing secrets at rest (delivery needs them back; see notify/webhooks.ts). */
  readonly webhookSealer: Sealer;
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
  /** Names a vanity URL may not take: every first path segment served, plus a fixed list (bundles/vanity.ts). */
  readonly reservedNames: ReadonlySet<string>;
  /** Files arriving through upload requests are mailed here. Absent in tests that build route tables. */
  readonly arrivals?: ArrivalNotifier;
  /** This node's traffic over the last hour and day (the console overview). Absent in tests that build route tables. */
  readonly history?: History;
}
