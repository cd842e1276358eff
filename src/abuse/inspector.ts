import { createHash, type Hash } from 'node:crypto';
import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import { AppError } from '../errors.ts';
import type { BlobDigest, BlobKey, BlobStore, BlobWriter } from '../storage/blob-store.ts';
import { isBlocked } from '../db/abuse.ts';
import { createBlocklistFlag } from './blocklist.ts';
import { verdictWithin, type Scanner, type ScanStream } from './clamd.ts';
import type { AbuseMetrics } from './metrics.ts';

/**
 * Checks every new file before a row names it: clamd's verdict (with CLAMD_URL) and the blocklist
 * of SHA-256 hashes. It is attached once, as a BlobStore around the real one (inspectedStore), so
 * both upload paths get it whichever store (disk, S3) holds the bytes:
 * - a writer (multipart) streams its bytes to clamd beside the store's write, and the store computes
 *   the SHA-256 on the way; finish() refuses the file, and the ingest removes every part of the request;
 * - a completed resumable (tus, whose bytes arrived over many requests, perhaps to several processes)
 *   is read back once it is published under its key and before any row names it: a refusal (422)
 *   deletes the object, an unreachable scanner (503) turns it back into the resumable, so a PATCH at
 *   the final offset retries.
 * A refusal is an AppError: MALWARE_DETECTED or BLOCKED_CONTENT (422), SCANNER_UNAVAILABLE (503).
 */
export interface Inspector {
  /** Whether new files are hashed as they are written: scanning is on or something is blocked. */
  hashing(): boolean;
  /** A writer whose bytes are inspected as they are written; finish() or publish() reject on a refusal. */
  wrap(store: BlobStore, writer: BlobWriter, onError: (err: Error) => void): BlobWriter;
  /** Inspects a published object no row names yet; resolves with its digest, the SHA-256 filled in when it was needed. */
  checkObject(store: BlobStore, key: BlobKey, digest: BlobDigest): Promise<BlobDigest>;
}

/** How old the "is anything blocked" answer may be when a file that was not hashed finishes. */
const BLOCKLIST_AGE_MS = 250;

export function createInspector(deps: { sql: Sql; scanner: Scanner | null; log: Logger; metrics: AbuseMetrics | null }): Inspector {
  const { sql, scanner, log, metrics } = deps;
  const blocklist = createBlocklistFlag(sql);
  blocklist.fresh().catch(() => {});

  /** Counted and logged once per file, whether the stream broke while it was written or at its end. */
  const reported = new WeakSet<object>();
  const scanFailed = (err: unknown, scan: object): AppError => {
    if (!reported.has(scan)) {
      reported.add(scan);
      metrics?.scanned('error');
      log.error({ err }, 'malware scan failed: upload refused');
    }
    return new AppError('SCANNER_UNAVAILABLE', undefined, { cause: err });
  };

  /** clamd's verdict on a stream that was fed the whole file (or its first maxBytes). */
  async function verdictOf(scan: ScanStream, size: number): Promise<void> {
    const t0 = process.hrtime.bigint();
    let verdict;
    try {
      verdict = await verdictWithin(scan);
    } catch (err) {
      throw scanFailed(err, scan);
    }
    metrics?.scanTime(Number(process.hrtime.bigint() - t0) / 1e9);
    metrics?.scanned(verdict.kind === 'found' ? 'found' : size > scanner!.maxBytes ? 'partial' : 'clean');
    if (verdict.kind === 'found') {
      log.warn({ signature: verdict.name, size }, 'malware detected: upload refused');
      throw new AppError('MALWARE_DETECTED', `Upload refused: a file was detected as malware (${verdict.name})`);
    }
  }

  async function blockCheck(sha256hex: string): Promise<void> {
    if (!(await isBlocked(sql, Buffer.from(sha256hex, 'hex')))) return;
    metrics?.blocked();
    log.warn({ sha256: sha256hex }, 'blocked content: upload refused');
    throw new AppError('BLOCKED_CONTENT');
  }

  /**
   * Reads a published object through the hash (when `hash`) and clamd (when `scan`); without a hash
   * to make, no further than clamd scans.
   */
  async function readThrough(store: BlobStore, key: BlobKey, hash: Hash | null, scan: ScanStream | null): Promise<void> {
    const end = hash === null && scan !== null ? scanner!.maxBytes : undefined;
    for await (const chunk of await store.read(key, { end })) {
      const piece = chunk as Buffer;
      hash?.update(piece);
      if (scan && scan.failed === null && !scan.write(piece)) await new Promise<void>((r) => scan.onDrain(r));
    }
  }

  function wrap(store: BlobStore, writer: BlobWriter, onError: (err: Error) => void): BlobWriter {
    const scan: ScanStream | null = scanner?.open((err) => onError(scanFailed(err, scan!))) ?? null;
    let size = 0;
    let digest: BlobDigest | null = null;
    let lateSha256: string | null = null;
    let writerFull = false;
    let scanFull = false;
    const refuse = async (err: unknown): Promise<never> => {
      scan?.abort();
      await writer.abort();
      throw err;
    };
    return {
      key: writer.key,
      write(chunk, transient) {
        size += chunk.length;
        if (scan && !scan.write(chunk)) scanFull = true;
        if (!writer.write(chunk, transient)) writerFull = true;
        return !writerFull && !scanFull;
      },
      onDrain(fn) {
        let waiting = (writerFull ? 1 : 0) + (scanFull ? 1 : 0);
        if (waiting === 0) return void setImmediate(fn);
        const one = (): void => {
          if (--waiting === 0) fn();
        };
        if (writerFull) writer.onDrain(() => ((writerFull = false), one()));
        if (scanFull) scan!.onDrain(() => ((scanFull = false), one()));
      },
      holding: () => writer.holding(),
      async finish() {
        try {
          [digest] = await Promise.all([writer.finish(), scan ? verdictOf(scan, size) : undefined]);
          if (digest.sha256 !== null) await blockCheck(digest.sha256);
          return digest;
        } catch (err) {
          return refuse(err);
        }
      },
      async publish() {
        await writer.publish();
        // Not hashed on the way (the list was empty then) but something is blocked now: read it back.
        if (digest?.sha256 !== null || !(await blocklist.within(BLOCKLIST_AGE_MS))) return;
        try {
          const hash = createHash('sha256');
          await readThrough(store, writer.key, hash, null);
          const hex = hash.digest('hex');
          await blockCheck(hex);
          lateSha256 = hex; // recorded with the row, which is asked again as it commits (blockedAmong)
        } catch (err) {
          return refuse(err);
        }
      },
      lateSha256: () => lateSha256,
      abort() {
        scan?.abort();
        return writer.abort();
      },
    };
  }

  async function checkObject(store: BlobStore, key: BlobKey, digest: BlobDigest): Promise<BlobDigest> {
    const hash = digest.sha256 === null && (scanner !== null || (await blocklist.within(BLOCKLIST_AGE_MS))) ? createHash('sha256') : null;
    if (scanner) {
      let failure: Error | null = null;
      const scan = scanner.open((err) => (failure = err));
      try {
        await readThrough(store, key, hash, scan);
      } catch (err) {
        scan.abort();
        throw err;
      }
      if (failure) throw scanFailed(failure, scan);
      await verdictOf(scan, digest.size);
    } else if (hash) {
      await readThrough(store, key, hash, null);
    }
    const sha256 = hash ? hash.digest('hex') : digest.sha256;
    if (sha256 !== null) await blockCheck(sha256);
    return { ...digest, sha256 };
  }

  return {
    hashing: () => scanner !== null || blocklist.get(),
    wrap,
    checkObject,
  };
}
