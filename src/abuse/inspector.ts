import { createHash, type Hash } from 'node:crypto';
import { open } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { Sql } from '../db/client.ts';
import { AppError } from '../errors.ts';
import type { PartResult, PartWriter } from '../storage/part-writer.ts';
import { createBlocklistFlag, isBlocked } from './blocklist.ts';
import { verdictWithin, type Scanner, type ScanStream } from './clamd.ts';
import type { AbuseMetrics } from './metrics.ts';

/** A part's result, with its SHA-256 when the blocklist made one necessary. */
export type InspectedPart = PartResult & { readonly sha256?: Buffer };

/**
 * Checks every new file before it is kept: clamd's verdict (with CLAMD_URL) and the blocklist of
 * SHA-256 hashes. The upload paths attach it in one place each:
 * - multipart (routes/upload.ts): `inspector.disk(deps.disk)` is the Disk that ingestion writes
 *   parts with; each part writer is wrapped, so its bytes go to clamd and the hash beside the disk
 *   write, and its finish() refuses the file (the ingest then removes every part of the request);
 * - tus (tus/complete.ts): `inspector.checkFile(part)` before the finished part is committed, since
 *   its bytes arrived over many requests, perhaps to several processes.
 * A refusal is an AppError: MALWARE_DETECTED or BLOCKED_CONTENT (422), SCANNER_UNAVAILABLE (503).
 */
export interface Inspector {
  /** A part writer whose bytes are inspected as they are written; finish() throws on a refusal. */
  wrap(writer: PartWriter, onError: (err: Error) => void): PartWriter;
  /** Inspects a whole finished part file; throws on a refusal (the caller removes the part). */
  checkFile(path: string): Promise<{ sha256?: Buffer }>;
  /** `disk` with every part it creates wrapped (see wrap). */
  disk<D extends { createPart(onError: (err: Error) => void): PartWriter }>(disk: D): D;
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

  /** The blocklist's answer for a file: `hash` from its stream, or read from `path` if none was made. */
  async function blockCheck(hash: Hash | null, path: string): Promise<Buffer | undefined> {
    if (hash === null && !(await blocklist.within(BLOCKLIST_AGE_MS))) return undefined;
    const digest = hash ? hash.digest() : await hashFile(path);
    if (await isBlocked(sql, digest)) {
      metrics?.blocked();
      log.warn({ sha256: digest.toString('hex') }, 'blocked content: upload refused');
      throw new AppError('BLOCKED_CONTENT');
    }
    return digest;
  }

  function wrap(writer: PartWriter, onError: (err: Error) => void): PartWriter {
    const scan: ScanStream | null = scanner?.open((err) => onError(scanFailed(err, scan!))) ?? null;
    // Hashed on the way only while something is blocked; otherwise at the end, if the list filled meanwhile.
    const hash = blocklist.get() ? createHash('sha256') : null;
    let size = 0;
    let writerFull = false;
    let scanFull = false;
    return {
      path: writer.path,
      write(chunk, transient) {
        size += chunk.length;
        hash?.update(chunk);
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
      async finish(): Promise<InspectedPart> {
        try {
          const [part] = await Promise.all([writer.finish(), scan ? verdictOf(scan, size) : undefined]);
          const sha256 = await blockCheck(hash, writer.path);
          return sha256 ? { ...part, sha256 } : part;
        } catch (err) {
          writer.abort();
          scan?.abort();
          throw err;
        }
      },
      abort() {
        writer.abort();
        scan?.abort();
      },
    };
  }

  async function checkFile(path: string): Promise<{ sha256?: Buffer }> {
    const hashing = blocklist.get() || (await blocklist.fresh());
    if (!scanner && !hashing) return {};
    const hash = hashing ? createHash('sha256') : null;
    let failure: Error | null = null;
    const scan = scanner?.open((err) => (failure = err)) ?? null;
    let size = 0;
    const fh = await open(path, 'r');
    const buf = Buffer.allocUnsafe(1 << 20);
    try {
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, buf.length, null);
        if (bytesRead === 0) break;
        const piece = buf.subarray(0, bytesRead);
        size += bytesRead;
        hash?.update(piece);
        if (scan && !failure && !scan.write(piece)) await new Promise<void>((r) => scan.onDrain(r));
      }
    } catch (err) {
      scan?.abort();
      throw err;
    } finally {
      await fh.close();
    }
    if (scan) await verdictOf(scan, size);
    const sha256 = await blockCheck(hash, path);
    return sha256 ? { sha256 } : {};
  }

  return {
    wrap,
    checkFile,
    disk: (disk) => ({ ...disk, createPart: (onError) => wrap(disk.createPart(onError), onError) }),
  };
}

/** SHA-256 of a file, read in 1 MiB pieces. */
async function hashFile(path: string): Promise<Buffer> {
  const h = createHash('sha256');
  const fh = await open(path, 'r');
  const buf = Buffer.allocUnsafe(1 << 20);
  try {
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      h.update(buf.subarray(0, bytesRead));
    }
  } finally {
    await fh.close();
  }
  return h.digest();
}
