import type { Sql } from '../db/sql.ts';
import { SHORT_CODE_RE } from '../util/tokens.ts';
import { CONTROL_CHARS, oneLine } from '../util/names.ts';
import { sqlUtc } from '../util/time.ts';
import { SHA256_RE } from '../abuse/blocklist.ts';
import { bundleByCode, listAudit, listBlocked, listReports } from '../db/abuse.ts';
import { blockAudited, closeReportAudited, deleteAudited, expireAudited, quarantineAudited, unblockAudited } from '../db/abuse-actions.ts';
import { parseFlags, UsageError } from './keys.ts';
import type { Logger } from 'pino';
import type { BlobStore } from '../storage/blob-store.ts';
import { createHashBackfill } from '../abuse/backfill.ts';
import { countUnhashed } from '../db/file-hashes.ts';
import { humanSize, plural } from '../util/html.ts';

/** What an operator command is given: its arguments (no --by), who runs it, and where output goes. */
export interface OperatorRun {
  sql: Sql;
  args: string[];
  operator: string;
  out: (line: string) => void;
  log: Logger;
  /** Runs `fn` with the stored files (opened only for the commands that need them). */
  withStore: <T>(fn: (store: BlobStore) => Promise<T>) => Promise<T>;
}

/** Someone else's text on one tab-separated line. */
const flat = (s: string | null): string => oneLine(s ?? '');

/** Takes `--by NAME` (or `--by=NAME`) out of `args`. */
export function takeBy(args: string[]): { args: string[]; by: string | undefined } {
  const rest: string[] = [];
  let by: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--by' || a.startsWith('--by=')) {
      const v = a === '--by' ? args[++i] : a.slice(5);
      if (v === undefined || v.trim() === '') throw new UsageError('--by needs a name');
      if (new RegExp(`[${CONTROL_CHARS}]`).test(v)) throw new UsageError('--by must not contain control characters');
      by = v;
    } else rest.push(a);
  }
  return { args: rest, by };
}

async function bundleOf(sql: Sql, code: string | undefined) {
  if (code === undefined) throw new UsageError('a bundle code is required');
  if (!SHORT_CODE_RE.test(code)) throw new UsageError(`invalid short code: ${code}`);
  const b = await bundleByCode(sql, code);
  if (!b) throw new UsageError(`unknown bundle: ${code}`);
  return b;
}

/** `sluice bundles expire|delete|quarantine|release CODE`. */
export async function bundlesCommand(r: OperatorRun): Promise<void> {
  const [action, code] = r.args;
  const usage = 'usage: sluice bundles expire|delete|quarantine|release CODE [--by NAME]';
  if (!['expire', 'delete', 'quarantine', 'release'].includes(action ?? '') || r.args.length !== 2) throw new UsageError(usage);
  const b = await bundleOf(r.sql, code);
  const target = b.short_code;
  if (action === 'expire') {
    await expireAudited(r.sql, b, r.operator);
    r.out(b.quarantined_at ? `expired ${target} (quarantined: kept until released)` : `expired ${target}`);
  } else if (action === 'delete') {
    const done = await r.withStore((store) => deleteAudited(r.sql, b, r.operator, store));
    if (!done) throw new UsageError(`unknown bundle: ${code}`);
    for (const f of done.failed) r.log.warn({ err: f.err, key: f.key }, 'stored file not removed: the sweeper removes it later');
    r.out(`deleted ${target}${done.failed.length ? ` (${plural(done.failed.length, 'stored file')} left for the sweeper)` : ''}`);
  } else {
    const on = action === 'quarantine';
    const changed = await quarantineAudited(r.sql, b, on, r.operator);
    r.out(changed ? `${on ? 'quarantined' : 'released'} ${target}` : `${target} was already ${on ? 'quarantined' : 'not quarantined'}`);
  }
}

/** `sluice block add SHA256 [--reason TEXT] | list | remove SHA256`. */
export async function blockCommand(r: OperatorRun): Promise<void> {
  const [action, ...rest] = r.args;
  const usage = 'usage: sluice block add SHA256 [--reason TEXT] | list | remove SHA256';
  const hashArg = (v: string | undefined): Buffer => {
    if (v === undefined) throw new UsageError(usage);
    const hex = v.toLowerCase();
    if (!SHA256_RE.test(hex)) throw new UsageError(`invalid SHA-256: ${v} (expected 64 hex digits)`);
    return Buffer.from(hex, 'hex');
  };
  if (action === 'add') {
    const [hex, ...flagArgs] = rest;
    const sha = hashArg(hex);
    const { reason } = parseFlags(flagArgs, ['reason']);
    if (reason !== undefined && new RegExp(`[${CONTROL_CHARS}]`).test(reason)) throw new UsageError('--reason must not contain control characters');
    const held = await blockAudited(r.sql, sha, reason ?? null, r.operator);
    r.out(`blocked ${sha.toString('hex')}${held.length ? `; quarantined ${held.join(' ')}` : ''}`);
    await hashStoredFiles(r);
    return;
  }
  if (action === 'remove') {
    if (rest.length !== 1) throw new UsageError(usage);
    const sha = hashArg(rest[0]);
    const removed = await unblockAudited(r.sql, sha, r.operator);
    if (!removed) throw new UsageError(`not blocked: ${sha.toString('hex')}`);
    r.out(`unblocked ${sha.toString('hex')} (bundles it quarantined stay quarantined until released)`);
    return;
  }
  if (action === 'list' && rest.length === 0) {
    for (const b of await listBlocked(r.sql)) r.out([Buffer.from(b.sha256).toString('hex'), sqlUtc(b.created_at), flat(b.created_by), flat(b.reason)].join('\t'));
    return;
  }
  throw new UsageError(usage);
}

/** Progress lines of hashStoredFiles come this far apart. */
const PROGRESS_MS = 10_000;

/**
 * After `block add`: reads and hashes every file stored without a SHA-256 (before anything was
 * blocked), so bundles that held the file before its hash was blocked are quarantined too. Run again
 * (or left to the sweeper), it goes on with the files not hashed yet.
 */
async function hashStoredFiles(r: OperatorRun): Promise<void> {
  const todo = await countUnhashed(r.sql);
  if (todo.files === 0) return;
  r.out(`hashing ${plural(todo.files, 'file')} (${humanSize(todo.bytes)}) stored without a recorded SHA-256`);
  let hashed = 0;
  let bytes = 0;
  let shown = Date.now();
  const found: string[] = [];
  const onFile = (f: { size: number; quarantined: string | null }): void => {
    hashed++;
    bytes += f.size;
    if (f.quarantined) {
      found.push(f.quarantined);
      r.out(`quarantined ${f.quarantined}`);
    }
    if (Date.now() - shown < PROGRESS_MS) return;
    shown = Date.now();
    r.out(`hashed ${hashed} of ${todo.files} files (${humanSize(bytes)} of ${humanSize(todo.bytes)})`);
  };
  let missing = 0;
  try {
    await r.withStore(async (store) => {
      const backfill = createHashBackfill({ sql: r.sql, store, log: r.log, operator: r.operator, note: 'found by block add', onFile });
      missing = (await backfill.pass({ files: Infinity, bytes: Infinity })).missing;
    });
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new Error(`hashing stopped after ${plural(hashed, 'file')} (${why}); block add again, or the sweeper, goes on with the rest`, { cause: err });
  }
  const more = found.length ? `quarantined ${plural(found.length, 'more bundle')}: ${found.sort().join(' ')}` : 'no other bundle holds a blocked file';
  r.out(`hashed ${plural(hashed, 'file')}; ${more}${missing ? `; ${plural(missing, 'file')} had no stored bytes (see the log)` : ''}`);
}

/** `sluice reports list [--open] | close ID`. */
export async function reportsCommand(r: OperatorRun): Promise<void> {
  const [action, ...rest] = r.args;
  const usage = 'usage: sluice reports list [--open] | close ID';
  if (action === 'list' && (rest.length === 0 || (rest.length === 1 && rest[0] === '--open'))) {
    for (const x of await listReports(r.sql, rest.length === 1)) {
      r.out(
        [
          x.id, sqlUtc(x.created_at), x.closed_at ? 'closed' : 'open', x.short_code, x.reason,
          // The first 8 hex of the reporter's keyed hash: tells repeat reporters apart.
          Buffer.from(x.reporter_hash).subarray(0, 4).toString('hex'), flat(x.contact), flat(x.details),
        ].join('\t'),
      );
    }
    return;
  }
  if (action === 'close' && rest.length === 1) {
    const id = rest[0]!;
    if (!/^[1-9]\d{0,17}$/.test(id)) throw new UsageError(`invalid report id: ${id}`);
    const result = await closeReportAudited(r.sql, id, r.operator);
    if (result === 'unknown') throw new UsageError(`unknown report: ${id}`);
    r.out(result === 'closed' ? `closed report ${id}` : `report ${id} was already closed`);
    return;
  }
  throw new UsageError(usage);
}

/** `sluice audit [--since DATE]`: oldest first, tab-separated. */
export async function auditCommand(r: OperatorRun): Promise<void> {
  const { since } = parseFlags(r.args, ['since']);
  let from: Date | null = null;
  if (since !== undefined) {
    const iso = /^\d{4}-\d{2}-\d{2}$/.test(since) ? `${since}T00:00:00Z` : since;
    const ok = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$/.test(iso);
    // Times are UTC unless they say otherwise, as everything the CLI prints.
    from = ok ? new Date(/(Z|[+-]\d{2}:?\d{2})$/.test(iso) ? iso.replace(' ', 'T') : `${iso.replace(' ', 'T')}Z`) : new Date(NaN);
    if (Number.isNaN(from.getTime())) throw new UsageError(`invalid --since: ${since} (expected a date such as 2026-11-26 or 2026-11-26T10:00:00Z)`);
  }
  for (const a of await listAudit(r.sql, from)) r.out([sqlUtc(a.at), a.action, a.target, flat(a.operator), flat(a.detail)].join('\t'));
}
