import { createHashQueue } from './abuse/hash-queue.ts';
import { createAdminAuth } from './auth/admin-sessions.ts';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import type { Deps } from './deps.ts';
import type { Db } from './db/client.ts';
import type { UwsBinding } from './http/uws.ts';
import type { FastPaths } from './ingest/fast-paths.ts';
import type { Metrics } from './metrics/metrics.ts';
import type { History } from './metrics/history.ts';
import type { BlobStore } from './storage/blob-store.ts';
import type { Opened } from './shutdown.ts';
import { createAccess } from './auth/access.ts';
import { createContentBudget, type ContentBudget } from './auth/content-budget.ts';
import type { Access } from './auth/caller.ts';
import { createBudgets } from './state/budget.ts';
import { createPasswords } from './auth/passwords.ts';
import { createBundleCache, type BundleCache } from './state/bundle-cache.ts';
import { createBundleWriter } from './db/bundle-writer.ts';
import { createDownloadCounts, createViewCounts, type BatchedCounts } from './db/download-counts.ts';
import { findActiveBundleWithFiles } from './db/bundles.ts';
import { unsubscribeUrl } from './routes/unsubscribe.ts';
import { createSigner, type Signer } from './auth/signing.ts';
import { createSealer } from './util/sealer.ts';
import { createOutbox, type Outbox } from './mail/outbox.ts';
import { createDownloadNotifier, type DownloadNotifier } from './notify/downloads.ts';
import { createArrivalNotifier, type ArrivalNotifier } from './notify/arrivals.ts';
import { createStripeClient } from './billing/stripe-client.ts';
import { createBilling, type Billing } from './billing/billing.ts';
import { createOriginOf } from './http/origin.ts';
import { createIpMatcher } from './http/client-ip.ts';
import { createScanner, streamMaxLength } from './abuse/clamd.ts';
import { createInspector } from './abuse/inspector.ts';
import { inspectedStore } from './abuse/inspected-store.ts';
import { createAbuseMetrics } from './abuse/metrics.ts';

/**
 * Bundle info may be served this long from memory without a change announcement: the bound on
 * staleness if an announcement is ever lost. Normally a change drops the copy at once.
 */
const BUNDLE_CACHE_TTL_MS = 2_000;
/** Bundles plus listed files held at most (~200 bytes a file): about 10 MiB. */
const BUNDLE_CACHE_WEIGHT = 50_000;

/** The route modules' Deps, and what the server, the loops and shutdown use beside them. */
export interface Wired {
  readonly deps: Deps;
  readonly access: Access;
  readonly content: ContentBudget;
  readonly billing: Billing;
  readonly outbox: Outbox;
  readonly downloads: DownloadNotifier;
  readonly arrivals: ArrivalNotifier;
  readonly downloadCounts: BatchedCounts;
  readonly viewCounts: BatchedCounts;
}

/**
 * Everything the handlers are given. `config` is the app's own copy: its BASE_URL may be filled in
 * at listen, so it is read when used, not copied here.
 */
export async function wireDeps(o: {
  config: Config;
  log: Logger;
  opened: Opened;
  blobs: BlobStore;
  secret: Buffer;
  metrics: Metrics;
  binding: UwsBinding;
  fastPaths: FastPaths;
  history: History;
}): Promise<Wired> {
  const { config, log, opened, metrics } = o;
  const db = opened.db;
  const signer = createSigner(o.secret);
  opened.consoleHashing = createHashQueue({ sql: db.sql, store: o.blobs, log });
  const { outbox, downloads, arrivals, billing } = await mailAndBilling({ config, log, sql: db.sql, secret: o.secret, signer, opened });
  const budgets = createBudgets({ store: opened.rateStore, log });
  const access = createAccess({ config, sql: db.sql, budgets, signer, log });
  const content = createContentBudget({ config, budgets, ipOf: (ctx) => access.ipOf(ctx), metrics });
  const downloadCounts = createDownloadCounts({ sql: db.sql, log });
  const viewCounts = createViewCounts({ sql: db.sql, log });
  const bundles = await openBundleCache(db, log);
  const scanner = config.clamdUrl ? createScanner({ url: config.clamdUrl, maxBytes: streamMaxLength(config.clamdConf) }) : null;
  if (scanner) log.info({ clamd: config.clamdUrl, scannedBytesPerFile: scanner.maxBytes }, 'malware scanning on');
  const inspector = createInspector({ sql: db.sql, scanner, log, metrics: createAbuseMetrics(metrics.registry) });
  const deps: Deps = {
    config,
    log,
    sql: db.sql,
    uploadLocks: db.uploadLocks,
    // Every new file is scanned and checked against the blocklist before a row names it.
    blobs: inspectedStore(o.blobs, inspector),
    access,
    origin: createOriginOf({
      baseUrl: config.baseUrlFollowsPort ? undefined : config.baseUrl,
      trusted: createIpMatcher(config.trustProxy),
      fallback: () => config.baseUrl,
    }),
    signer,
    admin: createAdminAuth({ sql: db.sql, signer }),
    consoleHashing: opened.consoleHashing,
    webhookSealer: createSealer(o.secret, 'webhooks'),
    store: opened.rateStore,
    passwords: createPasswords(),
    binding: o.binding,
    fastPaths: o.fastPaths,
    dbKind: db.kind,
    bundles,
    newBundles: createBundleWriter({ sql: db.sql }),
    metrics,
    downloads,
    downloadCounts,
    viewCounts,
    // Filled from the route table when the server is built (app.ts), so a new route's first segment is reserved with it.
    reservedNames: new Set<string>(),
    arrivals,
    history: o.history,
  };
  return { deps, access, content, billing, outbox, downloads, arrivals, downloadCounts, viewCounts };
}

/** The mail outbox, the notifiers that batch mails into it, and billing. */
async function mailAndBilling(o: { config: Config; log: Logger; sql: Db['sql']; secret: Buffer; signer: Signer; opened: Opened }) {
  const { config, log, sql, secret, signer, opened } = o;
  const outbox = createOutbox({ sql, sealer: createSealer(secret, 'mail-outbox'), transport: opened.mailTransport, from: config.mailFrom, log });
  // Download notifications and upload-request arrivals: mails batched the same way.
  const notifierDeps = {
    sql,
    outbox,
    log,
    get baseUrl() {
      return config.baseUrl;
    },
    unsubscribeUrl: (key: string) => unsubscribeUrl(config.baseUrl, signer, key),
    recorded: () => opened.background?.kickSoon(),
  };
  const downloads = createDownloadNotifier(notifierDeps);
  const arrivals = createArrivalNotifier(notifierDeps);
  const billing = createBilling({
    config,
    sql,
    stripe: await createStripeClient(config),
    sealer: createSealer(secret, 'purchase-reveal'),
    outbox,
    log,
    mailQueued: () => opened.background?.kick(),
  });
  return { outbox, downloads, arrivals, billing };
}

/** Bundle info, cached while the database announces changes to bundles. */
async function openBundleCache(db: Db, log: Logger): Promise<BundleCache> {
  const loadBundle = (code: string) => findActiveBundleWithFiles(db.sql, code);
  const cached = createBundleCache({ load: loadBundle, ttlMs: BUNDLE_CACHE_TTL_MS, maxWeight: BUNDLE_CACHE_WEIGHT });
  // Without a change feed a cached bundle could outlive its deletion: read through instead.
  const watching = await db.watchBundles((id) => cached.invalidate(id)).catch((err: unknown) => {
    log.warn({ err }, 'no bundle change feed (LISTEN failed): bundle info is read from the database every time');
    return false;
  });
  return watching ? cached : createBundleCache({ load: loadBundle, ttlMs: 0, maxWeight: 0 });
}
