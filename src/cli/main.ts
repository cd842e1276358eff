import { loadConfig, ConfigError, type Config } from '../config.ts';
import { createLogger, stderrClosed, textDestination } from '../log.ts';
import { banner } from './banner.ts';
import { startApp, type RunningApp } from '../app.ts';
import { connectDb } from '../db/client.ts';
import { type Sql } from '../db/sql.ts';
import { importPglite } from '../db/pglite-import.ts';
import { migrate } from '../db/migrate.ts';
import { createHasher } from '../storage/hasher.ts';
import { openBlobStore } from '../storage/open.ts';
import { sweepExclusive } from '../sweeper/sweep.ts';
import { createHashBackfill } from '../abuse/backfill.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import { operatorName } from '../abuse/audit.ts';
import { auditCommand, blockCommand, bundlesCommand, reportsCommand, takeBy } from './operator.ts';
import { keysCommand, UsageError } from './keys.ts';
import { adminCommand } from './admin.ts';
import { loadSecret } from '../auth/secret.ts';
import { supervise } from './supervise.ts';
import { createWorkerLink } from './worker-link.ts';
import { createNotifier } from './sd-notify.ts';
import { OWNER_ONLY_UMASK, usableDataDir } from '../util/data-dir.ts';

const USAGE = `usage: sluice <command>
  help                    this text
  send FILE…              upload into a new bundle from a shell; prints its link (sluice send --help)
  get LINK [-o DIR]       download a bundle's files (sluice get --help)
  serve                   run the server (what npm start runs)
  migrate                 apply sql/ migrations
  sweep                   one pass of expiry and orphan clean-up
  bundles expire CODE     set the bundle's expires_at to now
  bundles delete CODE     delete the bundle and its files
  bundles quarantine CODE every path of the bundle answers 451; its files are kept
  bundles release CODE    end a quarantine
  keys create --plan starter|power|max|premium [--label TEXT] [--email ADDR] [--days N]
  keys list               one row per key
  keys revoke PREFIX      revoke a key
  storage migrate --to s3://BUCKET[/PREFIX] [--dry-run] [--jobs N]
                          copy the files on disk into a bucket, verified; run again to resume
  import-pglite           copy an earlier release's embedded database (PGlite, DATA_DIR/pg) into the embedded PostgreSQL
  block add SHA256 [--reason TEXT]   refuse uploads of this file; quarantine bundles holding it
  block list | block remove SHA256
  reports list [--open]   abuse reports, oldest first
  reports close ID        mark a report handled
  audit [--since DATE]    operator actions, oldest first
  admin link [--label NAME] [--minutes N]   a one-time sign-in link to the operator console
  admin sessions | admin revoke ID|all      the console's sessions
Operator actions (revoke, bundles, block, reports close) are recorded in the audit trail
with --by NAME, or the name of the user running the command.`;

class CliError extends Error {}

const COMMANDS = new Set(['help', '--help', '-h', 'migrate', 'sweep', 'bundles', 'keys', 'block', 'reports', 'audit', 'import-pglite', 'storage', 'admin']);
const OPERATOR_COMMANDS = { bundles: bundlesCommand, block: blockCommand, reports: reportsCommand, audit: auditCommand } as const;
const TAKES_NOTHING = new Set(['serve', 'help', '--help', '-h', 'migrate', 'sweep', 'import-pglite']);

async function main(argv: string[]): Promise<void> {
  const [cmd = 'help', ...rest] = argv;
  // Bare `npx sluice` is someone finding out what it does: the help, not an error. Help needs no
  // configuration, so it shows even while a setting is wrong.
  if ((cmd === 'help' || cmd === '--help' || cmd === '-h') && rest.length === 0) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  // The command-line client talks to a server over HTTP: it reads none of the server's settings.
  if (cmd === 'send' || cmd === 'get') {
    const { runClient } = await import('../client/main.ts');
    const status = await runClient(argv, process.env);
    // Idle keep-alive sockets would hold the process open for seconds after the work is done.
    process.stdout.write('', () => process.exit(status));
    return;
  }
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const p of err.problems) process.stderr.write(`sluice: ${p}\n`);
      process.exit(1);
    }
    throw err;
  }
  if (cmd !== 'serve' && !COMMANDS.has(cmd)) throw new CliError(`unknown command: ${cmd} (see sluice help)`);
  // Commands that take nothing refuse what they were given (a typo'd flag must not run a sweep).
  if (TAKES_NOTHING.has(cmd) && rest.length > 0) throw new CliError(`sluice ${cmd} takes no arguments: ${rest.join(' ')}`);
  if (cmd === 'serve') return serve(config);
  for (const w of config.warnings) process.stderr.write(`sluice: warning: ${w}\n`);
  const log = loggerFor(config, config.logLevel === 'info' ? 'warn' : config.logLevel);
  process.umask(OWNER_ONLY_UMASK);
  if (!config.databaseUrl) usableDataDir(config.dataDir);
  const importing = cmd === 'import-pglite';
  if (importing && config.databaseUrl) throw new CliError('sluice import-pglite copies into the embedded database: unset DATABASE_URL');
  // A sweep holds its lock on one connection and works on another.
  const db = await connectDb({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, log, max: cmd === 'sweep' ? 2 : 1, allowLegacy: importing });
  try {
    if (importing) return await importCommand(config.dataDir, db.sql);
    await migrate(db.sql).then((applied) => cmd === 'migrate' && process.stdout.write(applied.length ? `applied ${applied.join(', ')}\n` : 'up to date\n'));
    if (cmd === 'migrate') return;
    if (cmd === 'sweep') {
      await withStore(config, async (blobs) => {
        const hashes = createHashBackfill({ sql: db.sql, store: blobs, log, operator: null, note: 'found by the sweeper' });
        const r = await sweepExclusive(db.sql, db.kind, blobs, { hashes });
        if (!r) throw new CliError('another process is sweeping this database now; nothing done (try again later)');
        process.stdout.write(
          `expired bundles: ${r.expiredBundles}, their files: ${r.expiredFiles}, stale parts: ${r.staleParts}, orphan files: ${r.orphanFiles}, cache files: ${r.cacheFiles}, expired tus uploads: ${r.tusUploads}, records of migrated copies: ${r.copyRecords}, files hashed for the blocklist: ${r.hashedFiles}\n`,
        );
      });
      return;
    }
    const out = (line: string): void => void process.stdout.write(`${line}\n`);
    try {
      const { args, by } = takeBy(rest);
      const operator = operatorName(by);
      if (cmd === 'storage') {
        // Not an audited action: no --by.
        await storageMigrate(config, db.sql, rest, out);
        return;
      }
      if (cmd === 'admin') {
        const secret = loadSecret(config.secret, config.dataDir);
        await adminCommand({ sql: db.sql, secret, origin: config.baseUrl, args, operator, out });
        return;
      }
      if (cmd === 'keys') {
        await keysCommand(db.sql, args, out, process.stdout.isTTY === true, operator);
        return;
      }
      if (cmd in OPERATOR_COMMANDS) {
        const run = { sql: db.sql, args, operator, out, log, withStore: <T>(fn: (store: BlobStore) => Promise<T>) => withStore(config, fn) };
        await OPERATOR_COMMANDS[cmd as keyof typeof OPERATOR_COMMANDS](run);
        return;
      }
    } catch (err) {
      if (err instanceof UsageError) throw new CliError(err.message);
      throw err;
    }
    throw new CliError(`unknown command: ${cmd} (see sluice help)`);
  } finally {
    await db.close();
  }
}

async function storageMigrate(config: Config, sql: Sql, args: string[], out: (line: string) => void): Promise<void> {
  // Ctrl-C (or SIGTERM) stops the copies in flight and removes what they wrote; the summary still
  // prints. A second signal exits at once.
  const stop = new AbortController();
  const onSignal = (): void => {
    if (stop.signal.aborted) process.exit(130);
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    // Loaded here: it brings the S3 SDK, which no other command of a disk installation needs.
    const { storageCommand } = await import('./storage-migrate.ts');
    const failed = await storageCommand({ sql, args, config, out, signal: stop.signal });
    if (failed > 0) throw new CliError(`storage migrate: ${failed} file(s) failed (the FAILED lines above); they are not copied, fix them and run again`);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Runs `fn` with the configured store (disk or S3), closed after. */
async function withStore<T>(config: Config, fn: (store: BlobStore) => Promise<T>): Promise<T> {
  const hasher = createHasher(1);
  let blobs: BlobStore | null = null;
  try {
    blobs = await openBlobStore(config, hasher);
    return await fn(blobs);
  } finally {
    await blobs?.close();
    await hasher.close();
  }
}

async function importCommand(dataDir: string, sql: Sql): Promise<void> {
  await migrate(sql);
  const counts = await importPglite(dataDir, sql).catch((err: Error) => {
    throw new CliError(`import-pglite: ${err.message}`);
  });
  const rows = counts.reduce((n, c) => n + c.rows, 0);
  process.stdout.write(`imported ${rows} rows (${counts.filter((c) => c.rows > 0).map((c) => `${c.table} ${c.rows}`).join(', ') || 'no rows'}) from ${dataDir}/pg; it is left in place: remove it once the server runs well\n`);
}

async function serve(config: Config): Promise<void> {
  if (config.workers > 1 && config.workerIndex === null) {
    // The supervisor speaks to systemd: READY once every worker listens, STOPPING on a stop signal.
    const log = loggerFor(config);
    warn(config, log);
    const notifier = createNotifier(config.notifySocket, log);
    const listening = (port: number): void => {
      if (humanOutput(config)) process.stderr.write(banner(config, port));
    };
    process.exit(await supervise({ workers: config.workers, host: config.host, port: config.port, log, env: process.env, notifier, listening, hangUpStops: startedInTerminal }));
  }
  const link = config.workerIndex === null ? undefined : createWorkerLink(process, config.workerIndex);
  const log = link ? loggerFor(config).child({ worker: link.index }) : loggerFor(config);
  if (!link) warn(config, log);
  // A supervisor that dies while this worker starts must not leave it serving on its own.
  let orphaned = false;
  link?.onSupervisorGone(() => (orphaned = true));
  // Stop signals are caught from the start: otherwise their default action would kill a server that is
  // still starting (or has just logged that it listens) with no cleanup. One that arrives while
  // starting is acted on as soon as the app is up.
  let app: RunningApp | null = null;
  let pendingStop: string | null = null;
  let stopping = false;
  let notifier: ReturnType<typeof createNotifier> | null = null;
  const stop = (signal: string): void => {
    if (stopping) return;
    if (!app) {
      // A second signal while starting (a start-up stuck on the database, say) stops at once.
      if (pendingStop) process.exit(1);
      pendingStop = signal;
      log.info({ signal }, 'stop requested while starting: stopping once started');
      return;
    }
    stopping = true;
    log.info({ signal, graceSeconds: config.shutdownGraceMs / 1000 }, 'shutting down');
    void notifier?.stopping();
    app.close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  // A stray rejection (a driver hiccup) is logged, never allowed to take every transfer down.
  process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
  process.on('SIGHUP', () => {
    // Its terminal closed: a program in the foreground of a terminal ends with it, drained as on SIGTERM.
    if (startedInTerminal) {
      // Logs to that terminal have nowhere to go now (a file or pipe given as stderr still gets them).
      if (process.stderr.isTTY) stderrClosed();
      return stop('SIGHUP');
    }
    // A service (systemd): configuration is read once at start and logs go to stderr (the journal),
    // so there is nothing to reload or reopen. Handling the signal keeps its default action (exit) from killing it.
    log.info('SIGHUP: nothing to reload; restart to apply configuration');
  });
  app = await startApp(config, log, link);
  if (!link && humanOutput(config)) process.stderr.write(banner(config, app.port));
  // A worker leaves systemd to its supervisor.
  notifier = createNotifier(link ? undefined : config.notifySocket, log);
  if (pendingStop) return stop(pendingStop);
  void notifier.ready(`serving on port ${app.port}`);
  if (link) {
    if (orphaned) stop('supervisor gone');
    else link.onSupervisorGone(() => stop('supervisor gone'));
    link.listening(app.port);
  }
}

/**
 * Whether the server was started from a terminal (any of its standard streams is one): there SIGHUP
 * means the terminal closed. A service manager, nohup or a redirect gives it none.
 */
const startedInTerminal = [process.stdin, process.stdout, process.stderr].some((s) => s.isTTY === true);

/** Short text lines for a person at a terminal (LOG_FORMAT=auto on a TTY, or text); JSON otherwise. */
function humanOutput(config: Config): boolean {
  return config.logFormat === 'text' || (config.logFormat === 'auto' && process.stderr.isTTY === true);
}

function loggerFor(config: Config, level = config.logLevel): ReturnType<typeof createLogger> {
  return createLogger(level, humanOutput(config) ? (textDestination() as Parameters<typeof createLogger>[1]) : undefined);
}

/** A misspelt setting is ignored, so the server starts on a default: say so before anything else. */
function warn(config: Config, log: ReturnType<typeof createLogger>): void {
  for (const w of config.warnings) log.warn(w);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`sluice: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
