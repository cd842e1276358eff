import { UploadPartCommand, type S3Client } from '@aws-sdk/client-s3';

const MIB = 1024 * 1024;
/** S3's smallest part other than the last. */
export const MIN_PART = 5 * MIB;
export const MAX_PARTS = 10_000;

/**
 * Size of part `n` (1-based): 8 MiB for the first 5,000 parts, 16 MiB for the rest, so 10,000
 * parts hold 117 GiB (every plan cap, 100 GiB included) while a writer's buffers stay small.
 */
export function partSize(n: number): number {
  return n <= 5000 ? 8 * MIB : 16 * MIB;
}

/** How many parts of one writer upload at once; with the part being filled, at most three buffers. */
const IN_FLIGHT = 2;

export interface UploadedPart {
  readonly PartNumber: number;
  readonly ETag: string;
  readonly size: number;
}

/**
 * Cuts a stream of chunks into parts of partSize(n) bytes and uploads them to one multipart upload,
 * at most IN_FLIGHT at a time. Each chunk is copied once, into the part's own buffer, so callers
 * may reuse theirs. write() answers false while a full part waits for a free upload slot: the
 * caller's body pauses (backpressure to the socket) until onDrain's callback runs.
 */
export interface PartQueue {
  write(chunk: Uint8Array): boolean;
  onDrain(fn: () => void): void;
  /** Bytes given to write() so far. */
  readonly received: () => number;
  /** Bytes in the part being filled (not yet cut). */
  readonly filling: () => number;
  /** Parts cut so far (uploaded, uploading or waiting). */
  readonly cut: () => number;
  /** Cuts the part being filled now, whatever its size (the last part of an object). */
  flush(): void;
  /** Drops all but the first `n` bytes of the part being filled (an append cut short by its caller). */
  shrink(n: number): void;
  /** Takes the bytes of the part being filled without uploading them (an append's short tail). */
  takeFilling(): Buffer;
  /** Resolves once every cut part is uploaded; rejects with the first failure. */
  settle(): Promise<readonly UploadedPart[]>;
  /** Cancels uploads in flight; settle() then rejects. onError is not called for it. */
  abort(): void;
}

export function createPartQueue(o: {
  client: S3Client;
  bucket: string;
  key: string;
  /** The multipart upload's id, created when the first part is cut (a small object never needs one). */
  uploadId: () => Promise<string>;
  /** Number of the first part this queue cuts (an append continues after the parts before it). */
  firstPart: number;
  onError: (err: Error) => void;
}): PartQueue {
  const ac = new AbortController();
  const done: UploadedPart[] = [];
  const waiting: { n: number; body: Buffer }[] = [];
  let part = Buffer.allocUnsafe(0);
  let fill = 0;
  let nextPart = o.firstPart;
  let received = 0;
  let inFlight = 0;
  let error: Error | null = null;
  let drain: (() => void) | null = null;
  let settled: (() => void) | null = null;

  const fail = (err: Error, report = true) => {
    if (error) return;
    error = err;
    ac.abort();
    if (report) o.onError(err);
    settled?.();
  };

  const cut = () => {
    if (nextPart > MAX_PARTS) {
      fail(new Error(`an object may have at most ${MAX_PARTS} parts`));
      return;
    }
    waiting.push({ n: nextPart++, body: part.subarray(0, fill) });
    part = Buffer.allocUnsafe(0);
    fill = 0;
    pump();
  };

  const pump = () => {
    while (!error && inFlight < IN_FLIGHT && waiting.length > 0) {
      const { n, body } = waiting.shift()!;
      inFlight++;
      void upload(n, body).then(
        () => {
          inFlight--;
          pump();
          if (waiting.length === 0) {
            const fn = drain;
            drain = null;
            fn?.();
          }
          if (inFlight === 0 && waiting.length === 0) settled?.();
        },
        (err: Error) => {
          inFlight--;
          fail(err);
        },
      );
    }
  };

  const upload = async (n: number, body: Buffer) => {
    const uploadId = await o.uploadId();
    const r = await o.client.send(
      new UploadPartCommand({ Bucket: o.bucket, Key: o.key, UploadId: uploadId, PartNumber: n, Body: body, ContentLength: body.length }),
      { abortSignal: ac.signal },
    );
    done.push({ PartNumber: n, ETag: r.ETag ?? '', size: body.length });
  };

  return {
    write(chunk) {
      if (error) return true;
      received += chunk.length;
      let at = 0;
      while (at < chunk.length) {
        if (part.length === 0) part = Buffer.allocUnsafe(partSize(nextPart));
        const n = Math.min(part.length - fill, chunk.length - at);
        part.set(chunk.subarray(at, at + n), fill);
        fill += n;
        at += n;
        if (fill === part.length) cut();
      }
      return waiting.length === 0;
    },
    onDrain(fn) {
      drain = fn;
    },
    received: () => received,
    filling: () => fill,
    cut: () => nextPart - o.firstPart,
    flush() {
      if (fill > 0) cut();
    },
    shrink(n) {
      fill = Math.min(fill, n);
    },
    takeFilling() {
      const out = part.subarray(0, fill);
      part = Buffer.allocUnsafe(0);
      fill = 0;
      return out;
    },
    settle() {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (error) reject(error);
          else if (inFlight === 0 && waiting.length === 0) resolve([...done].sort((a, b) => a.PartNumber - b.PartNumber));
          else return false;
          return true;
        };
        if (!check()) settled = () => void check();
      });
    },
    abort() {
      // The caller's own decision: no onError for it.
      fail(new Error('aborted'), false);
    },
  };
}
