import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { loadUws, type UwsBinding } from './http/uws.ts';
import { createHttpServer } from './http/server.ts';
import { connectDb, type Db } from './db/client.ts';
import { migrate } from './db/migrate.ts';
import { instanceId } from './db/instance.ts';
import { createHasher } from './storage/hasher.ts';
import { openBlobStore } from './storage/open.ts';
import type { BlobStore } from './storage/blob-store.ts';
import { sweepExclusive } from './sweeper/sweep.ts';
import { createHashBackfill, type HashBackfill } from './abuse/backfill.ts';
import { createMemoryRateStore, createRedisRateStore } from './state/rate-store.ts';
import { routeTable } from './routes/table.ts';
import { reservedNames } from './bundles/vanity.ts';
import { createMetrics, type Metrics } from './metrics/metrics.ts';
import { loadSecret } from './auth/secret.ts';
import type { WorkerLink } from './cli/worker-link.ts';
import { wireDeps, type Wired } from './wiring.ts';
import { closeAfterFailure, shutdown, type Opened } from './shutdown.ts';
import { createMailTransport } from './mail/transport.ts';
import { mailReports } from './abuse/report-mail.ts';
import { startWebhookDelivery } from './notify/webhook-delivery.ts';
import { startBackground, type Background } from './util/background.ts';
import { ensurePortFree } from './http/port-free.ts';
import { configureSlowReaders } from './http/client-waits.ts';
import { configureBodyFlow } from './http/body-spill.ts';
import path from 'node:path';
import { OWNER_ONLY_UMASK, ownedDirs, usableDataDir } from './util/data-dir.ts';
import { enableFastPaths, type FastPaths } from './ingest/fast-paths.ts';
import { createHistory, readTraffic, startSampler, type History, type Sampler } from './metrics/history.ts';
import { CLUSTER_EVERY, clusterSampler } from './db/console-samples.ts';

export interface RunningApp {
  readonly port: number;
  /**
   * Stops accepting, lets in-flight requests finish for up to `graceMs` (default
   * SHUTDOWN_GRACE_SECONDS), aborts the rest (their parts removed), then closes the database,
   * Redis and the hash workers, each phase bounded.
   */
  close(graceMs?: number): Promise<void>;
}

/** Config whose BASE_URL start-up may fill in (see startApp). */
type OwnConfig = { -readonly [K in keyof Config]: Config[K] };

/** Wires every dependency, migrates, sweeps crash leftovers, then listens. */
export async function startApp(given: Config, log: Logger, link?: WorkerLink): Promise<RunningApp> {
  // Our own copy: with PORT=0 and no BASE_URL, the origin is filled in once the port is known.
  const config: OwnConfig = { ...given };
  // With WORKERS > 1, worker 0 sweeps (at start and periodically); the others only serve.
  const sweeper = link === undefined || link.index === 0;
  const { binding, fastPaths } = prepareProcess(config, log);
  const db = await openDatabase(config, log, sweeper);
  const opened: Opened = {
    db,
    hasher: createHasher(),
    rateStore: createMemoryRateStore(),
    mailTransport: createMailTransport({ smtpUrl: config.smtpUrl, dataDir: config.dataDir }),
    background: null,
    webhooks: null,
    blobs: null,
    sampler: null,
    consoleHashing: null,
  };
  const metrics = createMetrics(link && { gather: () => link.gatherMetrics() });
  link?.serveMetrics(() => metrics.registry.getMetricsAsJSON());
  configureSlowReaders({ stallMs: config.downloadStallMs, onStall: () => metrics.stalledClosed() });
  try {
    const { blobs, hashes } = await openStores({ config, log, opened, metrics, sweeper });
    const secret = loadSecret(config.secret, config.dataDir);
    const history = createHistory(config.consoleSampleMs / 1000);
    const wired = await wireDeps({ config, log, opened, blobs, secret, metrics, binding, fastPaths, history });
    const { server, port } = await listen({ config, log, wired, secret, binding, metrics, opened });
    const sweepTimer = startSweeps({ config, log, db, blobs, hashes, metrics, sweeper });
    opened.sampler = startConsoleSampler({ config, log, db, metrics, history });
    opened.background = startBackgroundWork({ config, log, db, wired });
    // Every node delivers: each event is claimed by one of them (db/webhooks.ts claimDueEvents).
    opened.webhooks = startWebhookDelivery({ sql: db.sql, sealer: wired.deps.webhookSealer, log, allowPrivate: config.webhookAllowPrivate });
    log.info({ mail: opened.mailTransport.kind, billing: wired.billing.configured }, 'mail and billing ready');
    const { downloadCounts, viewCounts } = wired;
    return {
      port,
      close: (graceMs = config.shutdownGraceMs) => shutdown({ log, graceMs, sweepTimer, server, blobs, downloadCounts, viewCounts, opened }),
    };
  } catch (err) {
    await closeAfterFailure(opened);
    throw err;
  }
}

/** Owner-only files under a usable DATA_DIR, the uWS binding, and the multipart shortcuts it allows. */
function prepareProcess(config: Config, log: Logger): { binding: UwsBinding; fastPaths: FastPaths } {
  process.umask(OWNER_ONLY_UMASK);
  usableDataDir(config.dataDir);
  ownedDirs(path.join(config.dataDir, 'outbox'), 0); // mails written as files (the stores check theirs)
  const binding = loadUws();
  log.info({ binding: binding.name, version: binding.version, limits: binding.limits }, 'uWebSockets.js binding loaded');
  for (const limit of binding.limits) log.warn(`uWS ${binding.version}: ${limit}`);
  return { binding, fastPaths: enableFastPaths(log) };
}

async function openDatabase(config: Config, log: Logger, sweeper: boolean): Promise<Db> {
  // A start-up failure names the setting behind it (a bare ECONNREFUSED said nothing of which).
  return connectDb({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, log, max: 8, server: sweeper }).catch((err: Error) => {
    throw new Error(`${config.databaseUrl ? 'DATABASE_URL' : 'embedded database (DATA_DIR/postgres)'}: ${err.message}`, { cause: err });
  });
}

/**
 * Migrates, connects Redis and the file store (each recorded in `opened` as it opens), then sweeps
 * what a crash left behind.
 */
async function openStores(o: { config: Config; log: Logger; opened: Opened; metrics: Metrics; sweeper: boolean }): Promise<{ blobs: BlobStore; hashes: HashBackfill }> {
  const { config, log, opened, metrics } = o;
  const db = opened.db;
  const applied = await db.briefly(migrate);
  if (applied.length) log.info({ applied }, 'migrations applied');
  if (config.redisUrl) {
    const instance = await instanceId(db.sql);
    opened.rateStore = await createRedisRateStore(config.redisUrl, log, `sluice:${instance.slice(0, 12)}:`, () => metrics.redisError());
  }
  const blobs = await openBlobStore(config, opened.hasher);
  // Beside the store's temp parts: a real file system that the store made sure exists.
  configureBodyFlow({ spillDir: path.join(config.dataDir, 'tmp') });
  opened.blobs = blobs;
  // Files stored before anything was blocked get their SHA-256 a few per periodic sweep while the list
  // holds anything (not in the start-up sweep, which the server waits for).
  const hashes = createHashBackfill({ sql: db.sql, store: blobs, log, operator: null, note: 'found by the sweeper' });
  if (o.sweeper) {
    const r = await db.briefly((sql) => sweepExclusive(sql, db.kind, blobs));
    log.info(r ?? {}, r ? 'start-up sweep done' : 'start-up sweep skipped: another process is sweeping');
  }
  return { blobs, hashes };
}

/** Builds the route table and the server, and listens; BASE_URL follows the port bound when unset. */
async function listen(o: { config: OwnConfig; log: Logger; wired: Wired; secret: Buffer; binding: UwsBinding; metrics: Metrics; opened: Opened }) {
  const { config, log, wired, opened } = o;
  const { deps, access } = wired;
  const routes = routeTable({ ...deps, billing: wired.billing, secret: o.secret, reported: () => opened.background?.kickSoon(5_000) });
  for (const name of reservedNames(routes.map((r) => r.pattern))) (deps.reservedNames as Set<string>).add(name);
  const server = createHttpServer({ binding: o.binding, routes, log, admit: (ctx) => access.admit(ctx), content: wired.content, metrics: o.metrics });
  // A worker shares its supervisor's port on purpose; anyone else must have it alone.
  if (config.workerIndex === null && config.port !== 0) await ensurePortFree(config.host, config.port);
  const port = await server.listen(config.host, config.port);
  if (config.baseUrlFollowsPort) config.baseUrl = `http://localhost:${port}`;
  log.info({ host: config.host, port, database: opened.db.kind }, 'sluice listening');
  return { server, port };
}

/** The periodic sweep, on the sweeping process only; a sweep still running makes the next tick a no-op. */
function startSweeps(o: { config: Config; log: Logger; db: Db; blobs: BlobStore; hashes: HashBackfill; metrics: Metrics; sweeper: boolean }): NodeJS.Timeout {
  const { log, db, blobs, hashes, metrics, sweeper } = o;
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
  }, o.config.sweepIntervalMs);
  timer.unref();
  return timer;
}

/**
 * The console overview's history: this node's traffic every CONSOLE_SAMPLE_SECONDS, in memory; the
 * cluster's figures every CLUSTER_EVERY samples, into PostgreSQL by whichever node claims the step.
 */
function startConsoleSampler(o: { config: Config; log: Logger; db: Db; metrics: Metrics; history: History }): Sampler {
  const seconds = o.config.consoleSampleMs / 1000;
  return startSampler({
    history: o.history,
    intervalMs: o.config.consoleSampleMs,
    read: () => readTraffic(o.metrics),
    also: clusterSampler(o.db.sql, seconds * CLUSTER_EVERY),
    log: o.log,
  });
}

/** The loop for mail, notifications, abuse reports and billing housekeeping. */
function startBackgroundWork(o: { config: Config; log: Logger; db: Db; wired: Wired }): Background {
  const { config, db } = o;
  const { downloads, arrivals, outbox, billing } = o.wired;
  // Mail outbox, download notifications and billing housekeeping: one loop, kicked when work is queued
  // here, and every 30 s for retries, notification windows and work queued by other processes.
  return startBackground({
    tickMs: 30_000,
    log: o.log,
    tasks: [
      { name: 'notify', everyMs: 0, run: () => downloads.flush() },
      { name: 'arrivals', everyMs: 0, run: () => arrivals.flush() },
      { name: 'abuse reports', everyMs: 0, run: () => mailReports({ sql: db.sql, outbox, to: config.abuseEmail, baseUrl: config.baseUrl }) },
      { name: 'outbox', everyMs: 0, run: () => outbox.deliverDue() },
      { name: 'billing', everyMs: 60_000, run: () => billing.housekeeping() },
    ],
  });
}
