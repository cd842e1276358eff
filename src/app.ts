import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { loadUws } from './http/uws.ts';
import { createHttpServer } from './http/server.ts';
import { connectDb } from './db/client.ts';
import { migrate } from './db/migrate.ts';
import { instanceId } from './db/instance.ts';
import { createHasher } from './storage/hasher.ts';
import { openBlobStore } from './storage/open.ts';
import type { BlobStore } from './storage/blob-store.ts';
import { sweepExclusive } from './sweeper/sweep.ts';
import { createHashBackfill } from './abuse/backfill.ts';
import { createAccess } from './auth/access.ts';
import { createContentBudget } from './auth/content-budget.ts';
import { createBudgets } from './state/budget.ts';
import { createPasswords } from './auth/passwords.ts';
import { createMemoryRateStore, createRedisRateStore, type RateStore } from './state/rate-store.ts';
import type { Deps } from './deps.ts';
import { createBundleCache } from './state/bundle-cache.ts';
import { createBundleWriter } from './db/bundle-writer.ts';
import { createDownloadCounts, createViewCounts } from './db/download-counts.ts';
import { findActiveBundleWithFiles } from './db/bundles.ts';
import { unsubscribeUrl } from './routes/unsubscribe.ts';
import { routeTable } from './routes/table.ts';
import { reservedNames } from './bundles/vanity.ts';
import { createSigner } from './auth/signing.ts';
import { createMetrics } from './metrics/metrics.ts';
import { loadSecret } from './auth/secret.ts';
import type { WorkerLink } from './cli/worker-link.ts';
import { createSealer } from './util/sealer.ts';
import { createMailTransport } from './mail/transport.ts';
import { createOutbox } from './mail/outbox.ts';
import { createDownloadNotifier } from './notify/downloads.ts';
import { createArrivalNotifier } from './notify/arrivals.ts';
import { createStripeClient } from './billing/stripe-client.ts';
import { createBilling } from './billing/billing.ts';
import { startBackground, type Background } from './util/background.ts';
import { ensurePortFree } from './http/port-free.ts';
import { createOriginOf } from './http/origin.ts';
import { createIpMatcher } from './http/client-ip.ts';
import { configureSlowReaders } from './http/client-waits.ts';
import { configureBodyFlow } from './http/body-spill.ts';
import path from 'node:path';
import { OWNER_ONLY_UMASK, ownedDirs, usableDataDir } from './util/data-dir.ts';
import { enableFastPaths } from './ingest/fast-paths.ts';
import { createScanner, streamMaxLength } from './abuse/clamd.ts';
import { createInspector } from './abuse/inspector.ts';
import { inspectedStore } from './abuse/inspected-store.ts';
import { createAbuseMetrics } from './abuse/metrics.ts';
import { mailReports } from './abuse/report-mail.ts';

export interface RunningApp {
  readonly port: number;
  /**
   * Stops accepting, lets in-flight requests finish for up to `graceMs` (default
   * SHUTDOWN_GRACE_SECONDS), aborts the rest (their parts removed), then closes the database,
   * Redis and the hash workers, each phase bounded.
   */
  close(graceMs?: number): Promise<void>;
}

/**
 * Bundle info may be served this long from memory without a change announcement: the bound on
 * staleness if an announcement is ever lost. Normally a change drops the copy at once.
 */
const BUNDLE_CACHE_TTL_MS = 2_000;
/** Bundles plus listed files held at most (~200 bytes a file): about 10 MiB. */
const BUNDLE_CACHE_WEIGHT = 50_000;

/** Wires every dependency, migrates, sweeps crash leftovers, then listens. */
export async function startApp(given: Config, log: Logger, link?: WorkerLink): Promise<RunningApp> {
  // Our own copy: with PORT=0 and no BASE_URL, the origin is filled in once the port is known.
  const config: { -readonly [K in keyof Config]: Config[K] } = { ...given };
  // With WORKERS > 1, worker 0 sweeps (at start and periodically); the others only serve.
  const sweeper = link === undefined || link.index === 0;
  process.umask(OWNER_ONLY_UMASK);
  usableDataDir(config.dataDir);
  ownedDirs(path.join(config.dataDir, 'outbox'), 0); // mails written as files (the stores check theirs)
  const binding = loadUws();
  log.info({ binding: binding.name, version: binding.version, limits: binding.limits }, 'uWebSockets.js binding loaded');
  for (const limit of binding.limits) log.warn(`uWS ${binding.version}: ${limit}`);
  const fastPaths = enableFastPaths(log);

  // A start-up failure names the setting behind it (a bare ECONNREFUSED said nothing of which).
  const db = await connectDb({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, log, max: 8, server: sweeper }).catch((err: Error) => {
    throw new Error(`${config.databaseUrl ? 'DATABASE_URL' : 'embedded database (DATA_DIR/postgres)'}: ${err.message}`, { cause: err });
  });
  const hasher = createHasher();
  let rateStore: RateStore = createMemoryRateStore();
  const mailTransport = createMailTransport({ smtpUrl: config.smtpUrl, dataDir: config.dataDir });
  let background: Background | null = null;
  let opened: BlobStore | null = null;
  const metrics = createMetrics(link && { gather: () => link.gatherMetrics() });
  link?.serveMetrics(() => metrics.registry.getMetricsAsJSON());
  configureSlowReaders({ stallMs: config.downloadStallMs, onStall: () => metrics.stalledClosed() });
  try {
    const applied = await db.briefly(migrate);
    if (applied.length) log.info({ applied }, 'migrations applied');
    if (config.redisUrl) {
      const instance = await instanceId(db.sql);
      rateStore = await createRedisRateStore(config.redisUrl, log, `sluice:${instance.slice(0, 12)}:`, () => metrics.redisError());
    }
    const blobs = await openBlobStore(config, hasher);
    // Beside the store's temp parts: a real file system that the store made sure exists.
    configureBodyFlow({ spillDir: path.join(config.dataDir, 'tmp') });
    opened = blobs;
    // Files stored before anything was blocked get their SHA-256 a few per periodic sweep while the list
    // holds anything (not in the start-up sweep, which the server waits for).
    const hashes = createHashBackfill({ sql: db.sql, store: blobs, log, operator: null, note: 'found by the sweeper' });
    if (sweeper) {
      const r = await db.briefly((sql) => sweepExclusive(sql, db.kind, blobs));
      log.info(r ?? {}, r ? 'start-up sweep done' : 'start-up sweep skipped: another process is sweeping');
    }

    const secret = loadSecret(config.secret, config.dataDir);
    const signer = createSigner(secret);
    const outbox = createOutbox({ sql: db.sql, sealer: createSealer(secret, 'mail-outbox'), transport: mailTransport, from: config.mailFrom, log });
    // Download notifications and upload-request arrivals: mails batched the same way.
    const notifierDeps = {
      sql: db.sql,
      outbox,
      log,
      get baseUrl() {
        return config.baseUrl;
      },
      unsubscribeUrl: (key: string) => unsubscribeUrl(config.baseUrl, signer, key),
      recorded: () => background?.kickSoon(),
    };
    const downloads = createDownloadNotifier(notifierDeps);
    const arrivals = createArrivalNotifier(notifierDeps);
    const billing = createBilling({
      config,
      sql: db.sql,
      stripe: await createStripeClient(config),
      sealer: createSealer(secret, 'purchase-reveal'),
      outbox,
      log,
      mailQueued: () => background?.kick(),
    });
    const budgets = createBudgets({ store: rateStore, log });
    const access = createAccess({ config, sql: db.sql, budgets, signer, log });
    const content = createContentBudget({ config, budgets, ipOf: (ctx) => access.ipOf(ctx), metrics });
    const downloadCounts = createDownloadCounts({ sql: db.sql, log });
    const viewCounts = createViewCounts({ sql: db.sql, log });
    const loadBundle = (code: string) => findActiveBundleWithFiles(db.sql, code);
    const cached = createBundleCache({ load: loadBundle, ttlMs: BUNDLE_CACHE_TTL_MS, maxWeight: BUNDLE_CACHE_WEIGHT });
    // Without a change feed a cached bundle could outlive its deletion: read through instead.
    const watching = await db.watchBundles((id) => cached.invalidate(id)).catch((err: unknown) => {
      log.warn({ err }, 'no bundle change feed (LISTEN failed): bundle info is read from the database every time');
      return false;
    });
    const bundles = watching ? cached : createBundleCache({ load: loadBundle, ttlMs: 0, maxWeight: 0 });
    const scanner = config.clamdUrl ? createScanner({ url: config.clamdUrl, maxBytes: streamMaxLength(config.clamdConf) }) : null;
    if (scanner) log.info({ clamd: config.clamdUrl, scannedBytesPerFile: scanner.maxBytes }, 'malware scanning on');
    const inspector = createInspector({ sql: db.sql, scanner, log, metrics: createAbuseMetrics(metrics.registry) });
    const deps: Deps = {
      config,
      log,
      sql: db.sql,
      uploadLocks: db.uploadLocks,
      // Every new file is scanned and checked against the blocklist before a row names it.
      blobs: inspectedStore(blobs, inspector),
      access,
      origin: createOriginOf({
        baseUrl: config.baseUrlFollowsPort ? undefined : config.baseUrl,
        trusted: createIpMatcher(config.trustProxy),
        fallback: () => config.baseUrl,
      }),
      signer,
      store: rateStore,
      passwords: createPasswords(),
      binding,
      fastPaths,
      dbKind: db.kind,
      bundles,
      newBundles: createBundleWriter({ sql: db.sql }),
      metrics,
      downloads,
      downloadCounts,
      viewCounts,
      // Filled from the route table below, so a new route's first segment is reserved with it.
      reservedNames: new Set<string>(),
      arrivals,
    };
    const routes = routeTable({ ...deps, billing, secret, reported: () => background?.kickSoon(5_000) });
    for (const name of reservedNames(routes.map((r) => r.pattern))) (deps.reservedNames as Set<string>).add(name);
    const server = createHttpServer({ binding, routes, log, admit: (ctx) => access.admit(ctx), content, metrics });
    // A worker shares its supervisor's port on purpose; anyone else must have it alone.
    if (config.workerIndex === null && config.port !== 0) await ensurePortFree(config.host, config.port);
    const port = await server.listen(config.host, config.port);
    if (config.baseUrlFollowsPort) config.baseUrl = `http://localhost:${port}`;
    log.info({ host: config.host, port, database: db.kind }, 'sluice listening');

    let sweeping = false;
    const timer = setInterval(() => {
      if (sweeping || !sweeper) return;
      sweeping = true;
      sweepExclusive(db.sql, db.kind, blobs, { hashes })
        .then((r) => {
          if (!r) return log.debug('sweep skipped: another process is sweeping');
          metrics.sweepDone(r);
          log.info(r, 'sweep done');
        })
        .catch((err: unknown) => {
          metrics.sweepFailed();
          log.error({ err }, 'sweep failed');
        })
        .finally(() => (sweeping = false));
    }, config.sweepIntervalMs);
    timer.unref();
    // Mail outbox, download notifications and billing housekeeping: one loop, kicked when work is queued
    // here, and every 30 s for retries, notification windows and work queued by other processes.
    background = startBackground({
      tickMs: 30_000,
      log,
      tasks: [
        { name: 'notify', everyMs: 0, run: () => downloads.flush() },
        { name: 'arrivals', everyMs: 0, run: () => arrivals.flush() },
        { name: 'abuse reports', everyMs: 0, run: () => mailReports({ sql: db.sql, outbox, to: config.abuseEmail, baseUrl: config.baseUrl }) },
        { name: 'outbox', everyMs: 0, run: () => outbox.deliverDue() },
        { name: 'billing', everyMs: 60_000, run: () => billing.housekeeping() },
      ],
    });
    log.info({ mail: mailTransport.kind, billing: billing.configured }, 'mail and billing ready');

    return {
      port,
      async close(graceMs = config.shutdownGraceMs) {
        clearInterval(timer);
        server.stopListening();
        const idle = async (ms: number): Promise<void> => {
          const deadline = Date.now() + ms;
          while (server.inflight() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        };
        await idle(graceMs);
        if (server.inflight() > 0) {
          log.warn({ aborted: server.abortInflight() }, 'shutdown grace period over: aborting requests still in flight');
          await idle(5000);
        }
        // Abort handlers unlink without waiting; make sure no part of ours outlives the process.
        await phase(log, 'temp parts', () => blobs.removeOwnTemps());
        await phase(log, 'download counts', () => downloadCounts.flush());
        await phase(log, 'view counts', () => viewCounts.flush());
        await phase(log, 'background work', async () => background?.close());
        await phase(log, 'mail', async () => mailTransport.close());
        await phase(log, 'database', () => db.close());
        await phase(log, 'redis', () => rateStore.close());
        await phase(log, 'hash workers', () => hasher.close());
        await phase(log, 'storage', () => blobs.close());
      },
    };
  } catch (err) {
    await background?.close();
    mailTransport.close();
    await db.close().catch(() => {});
    await rateStore.close();
    await hasher.close();
    await opened?.close();
    throw err;
  }
}

/** One shutdown phase: bounded, and a failure is logged without stopping the phases after it. */
async function phase(log: Logger, name: string, fn: () => Promise<unknown>, ms = 5000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  try {
    await Promise.race([fn(), timeout]);
  } catch (err) {
    log.warn({ err, phase: name }, 'shutdown phase failed');
  } finally {
    clearTimeout(timer);
  }
}
