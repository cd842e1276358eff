import type { S3Client } from '@aws-sdk/client-s3';
import type { PartPool } from './part-pool.ts';
import { partAddress, putPart, type PartAddress } from './put-part.ts';

/** How many parts of one writer upload at once; with the part being filled, at most three buffers. */
const IN_FLIGHT = 2;

export interface UploadedPart {
  readonly PartNumber: number;
  readonly ETag: string;
  readonly size: number;
}

/** Where a part queue's parts go, and who hears of a failure. */
export interface PartTarget {
  client: S3Client;
  bucket: string;
  key: string;
  /** The multipart upload's id, created when the first part is cut (a small object never needs one). */
  uploadId: () => Promise<string>;
  /** What one part's upload may take, its retries included. */
  deadlineMs: number;
  onError: (err: Error) => void;
  pool: PartPool;
}

/** A part cut and waiting for an upload slot: its bytes, and the pool buffer that holds them. */
interface CutPart {
  readonly n: number;
  readonly body: Buffer;
  readonly buf: Buffer;
}

/** The uploads of one part queue (parts.ts): the parts it cut, uploaded at most IN_FLIGHT at a time. */
export interface PartUploads {
  readonly o: PartTarget;
  readonly ac: AbortController;
  readonly done: UploadedPart[];
  readonly waiting: CutPart[];
  inFlight: number;
  /** The first failure; nothing is uploaded after it. */
  error: Error | null;
  /** settle()'s check, while it waits. */
  settled: (() => void) | null;
  /** Runs after each part uploaded, once its slot is free again. */
  readonly freed: () => void;
  /** Where parts go, learnt at the first part. */
  address: Promise<PartAddress> | null;
}

export function partUploads(o: PartTarget, freed: () => void): PartUploads {
  return { o, ac: new AbortController(), done: [], waiting: [], inFlight: 0, error: null, settled: null, freed, address: null };
}

/** Starts uploads of waiting parts while a slot is free. */
export function pump(u: PartUploads): void {
  while (!u.error && u.inFlight < IN_FLIGHT && u.waiting.length > 0) {
    const { n, body, buf } = u.waiting.shift()!;
    u.inFlight++;
    void upload(u, n, body).then(
      () => {
        u.inFlight--;
        u.o.pool.give(buf, body.length);
        pump(u);
        u.freed();
        if (u.inFlight === 0 && u.waiting.length === 0) u.settled?.();
      },
      (err: Error) => {
        u.inFlight--;
        // An aborted request may still be writing its body: the buffer is not reused or unmapped.
        u.o.pool.drop(buf);
        failUploads(u, err);
      },
    );
  }
}

async function upload(u: PartUploads, n: number, body: Buffer): Promise<void> {
  const { o } = u;
  u.address ??= o.uploadId().then((id) => partAddress(o.client, o.bucket, o.key, id));
  const ETag = await putPart(o.client, await u.address, n, body, o.deadlineMs, u.ac.signal);
  u.done.push({ PartNumber: n, ETag, size: body.length });
}

/** Cancels uploads in flight and drops waiting parts; `report`: tell onError. */
export function failUploads(u: PartUploads, err: Error, report = true): void {
  if (u.error) return;
  u.error = err;
  u.ac.abort();
  if (report) u.o.onError(err);
  for (const w of u.waiting.splice(0)) u.o.pool.give(w.buf, w.body.length);
  u.settled?.();
}

/** Resolves once every cut part is uploaded, in part order; rejects with the first failure. */
export function settleUploads(u: PartUploads): Promise<readonly UploadedPart[]> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (u.error) reject(u.error);
      else if (u.inFlight === 0 && u.waiting.length === 0) resolve([...u.done].sort((a, b) => a.PartNumber - b.PartNumber));
      else return false;
      return true;
    };
    if (!check()) u.settled = () => void check();
  });
}
