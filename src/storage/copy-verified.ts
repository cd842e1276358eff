import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { crc32 } from '../util/crc32.mjs';
import { type BlobKey, type BlobStore } from './blob-store.ts';
import { isBlobError } from '../errors.ts';
import { digestStored } from './digest-stored.ts';
import type { S3Store } from './s3/store.ts';

/** What the file's row says of its bytes. */
export interface Recorded {
  readonly size: number;
  readonly crc32: number;
  /** Null when the row has none (files uploaded since sql/0007). */
  readonly sha256: Uint8Array | null;
}

export type CopyOutcome =
  /** In the bucket, read back and found equal to the source; `sha256` of those bytes. */
  | { readonly kind: 'copied'; readonly size: number; readonly sha256: Buffer }
  /** The source holds no object under the key. */
  | { readonly kind: 'missing' }
  /** The source or the copy is not what it must be; nothing of it counts as copied. */
  | { readonly kind: 'failed'; readonly reason: string };

/**
 * Copies one object from `from` into `to` under the same key, streaming through the S3 writer
 * (a multipart upload past one part), with memory bounded by the writer's part buffers. The source
 * is hashed as it is read and must match its row (size, CRC-32, and SHA-256 when recorded) before
 * the copy is published; the published object is then read back from the bucket and hashed, and
 * only a copy whose bytes hash the same counts. An outage of the bucket throws (UNAVAILABLE);
 * `signal` stops the copy and removes what it wrote.
 */
export async function copyVerified(from: BlobStore, to: S3Store, key: BlobKey, recorded: Recorded, signal: AbortSignal): Promise<CopyOutcome> {
  let source: Readable;
  try {
    source = await from.read(key);
  } catch (err) {
    if (isBlobError(err, 'NOT_FOUND')) return { kind: 'missing' };
    throw err;
  }
  const stop = () => source.destroy(new Error('interrupted'));
  signal.addEventListener('abort', stop, { once: true });
  let failWrite!: (err: Error) => void;
  const writeFailed = new Promise<never>((_, reject) => (failWrite = reject));
  writeFailed.catch(() => {});
  const writer = to.writerAt(key, { onError: (err) => failWrite(err) });
  const hash = createHash('sha256');
  let crc = 0;
  let size = 0;
  try {
    if (signal.aborted) stop();
    for await (const chunk of source as AsyncIterable<Buffer>) {
      hash.update(chunk);
      crc = crc32(chunk, crc);
      size += chunk.length;
      if (!writer.write(chunk)) await Promise.race([new Promise<void>((resolve) => writer.onDrain(resolve)), writeFailed]);
    }
    await writer.finish();
    const sha256 = hash.digest();
    const wrong = sourceProblem(recorded, size, crc >>> 0, sha256);
    if (wrong) {
      await writer.abort();
      return { kind: 'failed', reason: `corrupt on disk: ${wrong}; nothing copied` };
    }
    await writer.publish();
    const back = await digestStored(to, key, signal);
    if (back.size !== size || !back.sha256.equals(sha256)) {
      // A copy known to be wrong must not be served after the switch: better none.
      await writer.abort();
      return {
        kind: 'failed',
        reason: `the bucket's copy differs from the source (${back.size} bytes, SHA-256 ${back.sha256.toString('hex')}; ` +
          `the source: ${size} bytes, ${sha256.toString('hex')}); removed from the bucket`,
      };
    }
    return { kind: 'copied', size, sha256 };
  } catch (err) {
    source.destroy();
    await writer.abort();
    throw err;
  } finally {
    signal.removeEventListener('abort', stop);
  }
}

/** Why bytes read are not the ones the row describes, or null. SHA-256 first: it is the stronger check. */
function sourceProblem(recorded: Recorded, size: number, crc: number, sha256: Buffer): string | null {
  if (size !== recorded.size) return `the file holds ${size} bytes, its row says ${recorded.size}`;
  if (recorded.sha256 && !sha256.equals(Buffer.from(recorded.sha256))) {
    return `SHA-256 ${sha256.toString('hex')} differs from the recorded ${Buffer.from(recorded.sha256).toString('hex')}`;
  }
  if (crc !== recorded.crc32) return `CRC-32 ${crc.toString(16).padStart(8, '0')} differs from the recorded ${recorded.crc32.toString(16).padStart(8, '0')}`;
  return null;
}

/**
 * Checks an object the bucket already holds against its row, for a file no longer on disk: one a run
 * killed after the publish left unrecorded, or one uploaded to the bucket after the switch.
 */
export async function verifyInPlace(store: BlobStore, key: BlobKey, recorded: Recorded, signal: AbortSignal): Promise<CopyOutcome> {
  let d: { size: number; crc: number; sha256: Buffer };
  try {
    d = await digestStored(store, key, signal);
  } catch (err) {
    if (isBlobError(err, 'NOT_FOUND')) return { kind: 'missing' };
    throw err;
  }
  const wrong = sourceProblem(recorded, d.size, d.crc, d.sha256);
  return wrong ? { kind: 'failed', reason: `not on disk, and the bucket's object differs from its row: ${wrong}` } : { kind: 'copied', size: d.size, sha256: d.sha256 };
}
