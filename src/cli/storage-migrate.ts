import fs from 'node:fs';
import path from 'node:path';
import { describeLocation, parseStorageUrl, type Config, type S3Location } from '../config.ts';
import type { Sql } from '../db/sql.ts';
import { copyCounts, fileExists, filesToCopy, recordCopy, type CopyCandidate } from '../db/storage-copies.ts';
import { type BlobStore } from '../storage/blob-store.ts';
import { isBlobError } from '../errors.ts';
import { copyVerified, verifyInPlace, type CopyOutcome } from '../storage/copy-verified.ts';
import { createDiskStore } from '../storage/disk/store.ts';
import { createHasher } from '../storage/hasher.ts';
import { StorageSetupError } from '../storage/s3/client.ts';
import { createS3Store, type S3Store } from '../storage/s3/store.ts';
import { parseFlags, UsageError } from './keys.ts';

export const STORAGE_USAGE = 'usage: sluice storage migrate --to s3://BUCKET[/PREFIX] [--dry-run] [--jobs N]';

/** Rows fetched per query; each batch is copied before the next is read. */
const BATCH = 100;

export interface StorageRun {
  sql: Sql;
  args: string[];
  config: Pick<Config, 'dataDir' | 's3' | 's3Access'>;
  out: (line: string) => void;
  /** Aborted on Ctrl-C: copies in flight stop and remove what they wrote. */
  signal: AbortSignal;
}

interface Tally {
  copied: number;
  bytes: number;
  failed: number;
  gone: number;
  inBucket: number;
}

/**
 * `sluice storage migrate --to s3://BUCKET[/PREFIX]`: copies the file of every row of a live bundle
 * from the disk store under DATA_DIR into the bucket, under the same key, verified (copyVerified),
 * and records each verified copy in storage_copies so that the next run copies only the rest.
 * Returns the number of files that failed.
 */
export async function storageCommand(r: StorageRun): Promise<number> {
  const [action, ...rest] = r.args;
  if (action !== 'migrate') throw new UsageError(STORAGE_USAGE);
  const dryRun = rest.includes('--dry-run');
  const flags = parseFlags(rest.filter((a) => a !== '--dry-run'), ['to', 'jobs']);
  if (flags.to === undefined) throw new UsageError(STORAGE_USAGE);
  const problems: string[] = [];
  const location = parseStorageUrl('--to', flags.to, r.config.s3Access, problems);
  if (!location || problems.length) throw new UsageError(problems[0]!);
  const jobs = flags.jobs === undefined ? 4 : /^([1-9]|[1-5]\d|6[0-4])$/.test(flags.jobs) ? Number(flags.jobs) : NaN;
  if (Number.isNaN(jobs)) throw new UsageError(`invalid --jobs: ${flags.jobs} (expected 1 to 64)`);
  const target = describeLocation(location);
  // The last run is made with STORAGE_URL already set: it must fill the bucket the server will use.
  if (r.config.s3 && describeLocation(r.config.s3) !== target) {
    throw new UsageError(`STORAGE_URL names ${describeLocation(r.config.s3)} but --to names ${target}; they must be the same bucket`);
  }
  const filesDir = path.join(r.config.dataDir, 'files');
  if (!fs.existsSync(filesDir)) throw new UsageError(`no files on disk at ${filesDir}: run with the disk installation's DATA_DIR`);

  const counts = await copyCounts(r.sql, target);
  const expiredNote = counts.expired ? `, ${counts.expired} of expired bundles left out` : '';
  if (dryRun) {
    let n = 0;
    let bytes = 0;
    for await (const f of candidates(r.sql, target)) {
      r.out(`would copy ${f.storage_key} (${f.short_code}, ${f.size} bytes)`);
      n++;
      bytes += f.size;
    }
    r.out(`would copy ${n} (${bytes} bytes), skipped ${counts.verified} already verified${expiredNote}`);
    return 0;
  }

  const hasher = createHasher(1);
  let to: S3Store | null = null;
  try {
    to = await openTarget(location, r.config.dataDir);
    const from = await createDiskStore(r.config.dataDir, hasher);
    const t: Tally = { copied: 0, bytes: 0, failed: 0, gone: 0, inBucket: 0 };
    const copyOne = (f: CopyCandidate) => copyFile(r, from, to!, target, f, t);
    const summary = () => {
      const extra = `${t.inBucket ? `, ${t.inBucket} found in the bucket only` : ''}${t.gone ? `, ${t.gone} deleted meanwhile` : ''}${expiredNote}`;
      r.out(`copied ${t.copied} (${t.bytes} bytes), skipped ${counts.verified} already verified, failed ${t.failed}${extra}`);
    };
    try {
      for await (const batch of batches(r.sql, target)) {
        if (r.signal.aborted) break;
        await pool(batch, jobs, copyOne, r.signal);
      }
    } catch (err) {
      // What was verified before the error stays recorded: say how far the run got.
      summary();
      throw err;
    }
    summary();
    if (r.signal.aborted) throw new Error('storage migrate: interrupted; run it again to copy the rest');
    return t.failed;
  } finally {
    await to?.close();
    await hasher.close();
  }
}

async function openTarget(location: S3Location, dataDir: string): Promise<S3Store> {
  try {
    return await createS3Store({ location, tmpDir: path.join(dataDir, 'tmp') });
  } catch (err) {
    // checkBucket names STORAGE_URL; here the bucket came from --to.
    if (err instanceof StorageSetupError) throw new UsageError(err.message.replace(/^STORAGE_URL:/, '--to:'));
    throw err;
  }
}

async function copyFile(r: StorageRun, from: BlobStore, to: S3Store, target: string, f: CopyCandidate, t: Tally): Promise<void> {
  const what = `${f.storage_key} (${f.short_code}, ${f.size} bytes)`;
  let outcome: CopyOutcome;
  let inBucket = false;
  try {
    outcome = await copyVerified(from, to, f.storage_key, f, r.signal);
    if (outcome.kind === 'missing') {
      if (!(await fileExists(r.sql, f.storage_key))) {
        t.gone++;
        r.out(`deleted meanwhile ${what}`);
        return;
      }
      inBucket = true;
      outcome = await verifyInPlace(to, f.storage_key, f, r.signal);
      if (outcome.kind === 'missing') outcome = { kind: 'failed', reason: 'missing on disk, and not in the bucket' };
    }
  } catch (err) {
    if (r.signal.aborted) return;
    // A bucket gone away fails every file alike: stop the run at the first such error.
    if (isBlobError(err, 'UNAVAILABLE')) throw err;
    outcome = { kind: 'failed', reason: err instanceof Error ? err.message : String(err) };
  }
  if (outcome.kind === 'copied') {
    await recordCopy(r.sql, target, f.storage_key, outcome.size, outcome.sha256);
    if (inBucket) t.inBucket++;
    else {
      t.copied++;
      t.bytes += outcome.size;
    }
    r.out(`${inBucket ? 'verified in the bucket (not on disk)' : 'copied'} ${what} sha256 ${outcome.sha256.toString('hex')}`);
  } else if (outcome.kind === 'failed') {
    t.failed++;
    r.out(`FAILED ${what}: ${outcome.reason}`);
  }
}

async function* batches(sql: Sql, target: string): AsyncGenerator<CopyCandidate[]> {
  let after = 0;
  for (;;) {
    const batch = await filesToCopy(sql, target, after, BATCH);
    if (batch.length === 0) return;
    yield batch;
    after = batch[batch.length - 1]!.id;
  }
}

async function* candidates(sql: Sql, target: string): AsyncGenerator<CopyCandidate> {
  for await (const batch of batches(sql, target)) yield* batch;
}

/** Runs `fn` over `items`, `n` at a time; the first error stops new work and is thrown once the rest settle. */
async function pool<T>(items: T[], n: number, fn: (item: T) => Promise<void>, signal: AbortSignal): Promise<void> {
  let next = 0;
  let error: unknown = null;
  const worker = async (): Promise<void> => {
    while (next < items.length && error === null && !signal.aborted) {
      const item = items[next++]!;
      await fn(item).catch((err: unknown) => (error ??= err));
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
  if (error !== null) throw error;
}
