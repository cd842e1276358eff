import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { BlobError, type BlobKey, type BlobReader } from './blob-store.ts';
import { mapNotFound, s3Status } from './s3-client.ts';
import type { S3Ctx } from './s3-writer.ts';

export async function objectSize(ctx: S3Ctx, objectKey: string, what: string): Promise<number> {
  try {
    const h = await ctx.client.send(new HeadObjectCommand({ Bucket: ctx.bucket, Key: objectKey }));
    return h.ContentLength ?? 0;
  } catch (err) {
    throw mapNotFound(err, what);
  }
}

/**
 * Bytes [start, end) of an object as the HTTP response body itself, so memory stays at the socket's
 * buffers and the consumer's pace is the server's (backpressure through TCP). A Range the server
 * cannot satisfy (416) is looked at again with the object's size, to tell an empty range at the
 * end from one past it.
 */
export async function readRange(
  ctx: S3Ctx,
  objectKey: string,
  what: string,
  range: { readonly start?: number; readonly end?: number } = {},
): Promise<Readable> {
  const start = range.start ?? 0;
  if (range.end !== undefined && range.end <= start) {
    const size = await objectSize(ctx, objectKey, what);
    if (start > size) throw new BlobError('OUT_OF_RANGE', `${what}: range starts at ${start}, past its ${size} bytes`);
    return Readable.from([]);
  }
  const header = start === 0 && range.end === undefined ? undefined : `bytes=${start}-${range.end === undefined ? '' : range.end - 1}`;
  try {
    const r = await ctx.client.send(new GetObjectCommand({ Bucket: ctx.bucket, Key: objectKey, Range: header }));
    return r.Body as Readable;
  } catch (err) {
    if (s3Status(err).status !== 416) throw mapNotFound(err, what);
  }
  const size = await objectSize(ctx, objectKey, what);
  if (start === size) return Readable.from([]);
  throw new BlobError('OUT_OF_RANGE', `${what}: range starts at ${start}, past its ${size} bytes`);
}

/**
 * A random reader that is cheap when read in order, as downloads and zips read: one GET from the
 * position asked to the object's end serves every read that continues where the last one stopped,
 * and between reads it is paused, so what it holds is the socket's buffers (TCP backpressure, no
 * read-ahead in memory). A read elsewhere moves that GET; one that overlaps a read in progress is a
 * ranged GET of its own.
 */
export async function openReader(ctx: S3Ctx, key: BlobKey): Promise<BlobReader> {
  const objectKey = ctx.fileKey(key);
  const what = `object ${key}`;
  const size = await objectSize(ctx, objectKey, what);
  const ac = new AbortController();
  let cursor: Cursor | null = null;
  let opening = false;
  let closed = false;
  const get = async (pos: number, end: number): Promise<Readable> => {
    try {
      const r = await ctx.client.send(
        new GetObjectCommand({ Bucket: ctx.bucket, Key: objectKey, Range: `bytes=${pos}-${end - 1}` }),
        { abortSignal: ac.signal },
      );
      return r.Body as Readable;
    } catch (err) {
      throw mapNotFound(err, what);
    }
  };
  return {
    size,
    async readInto(target, pos) {
      if (target.length === 0) return;
      if (pos + target.length > size) throw new BlobError('SHORT', `${what} holds ${size} bytes, asked up to ${pos + target.length}`);
      let got: number;
      if (opening || cursor?.busy) {
        const body = await get(pos, pos + target.length);
        got = await fill(createCursor(body, pos, ctx.bodyGarbage), target).finally(() => body.destroy());
      } else {
        if (!cursor || cursor.failed || cursor.pos !== pos || (cursor.body.destroyed && !cursor.body.readableEnded)) {
          cursor?.body.destroy();
          cursor = null;
          opening = true;
          try {
            const body = await get(pos, size);
            if (closed) body.destroy();
            cursor = createCursor(body, pos, ctx.bodyGarbage);
          } finally {
            opening = false;
          }
        }
        got = await fill(cursor, target);
      }
      if (got < target.length) throw new BlobError('SHORT', `${what} ended at ${pos + got}, asked up to ${pos + target.length}`);
    },
    close() {
      closed = true;
      ac.abort();
      cursor?.body.destroy();
      cursor = null;
    },
  };
}

/**
 * A reader's GET left unread this long is closed (the next read opens another): a client that stopped
 * reading must not keep a socket of the store's bounded pool, which every upload and read shares.
 */
const CURSOR_IDLE_MS = 1000;

/** A GET's body being read in order: where it stands, and the rest of a chunk a read did not take. */
interface Cursor {
  readonly body: Readable;
  readonly garbage: (bytes: number) => void;
  pos: number;
  rest: Buffer | null;
  busy: boolean;
  /** The body failed or was closed between reads. */
  failed: boolean;
  idle: NodeJS.Timeout | null;
}

function createCursor(body: Readable, pos: number, garbage: (bytes: number) => void): Cursor {
  const c: Cursor = { body, garbage, pos, rest: null, busy: false, failed: false, idle: null };
  body.pause();
  body.once('close', () => {
    if (c.idle) clearTimeout(c.idle);
  });
  body.on('error', () => (c.failed = true));
  return c;
}

/** Copies the cursor's next bytes into `target`; resolves with how many (short only at the body's end). */
function fill(c: Cursor, target: Buffer): Promise<number> {
  let at = 0;
  const take = (chunk: Buffer): void => {
    const n = Math.min(chunk.length, target.length - at);
    chunk.copy(target, at, 0, n);
    at += n;
    c.pos += n;
    c.rest = n < chunk.length ? chunk.subarray(n) : null;
  };
  if (c.rest) take(c.rest);
  if (c.idle) clearTimeout(c.idle);
  const idleAfter = (): void => {
    c.idle = setTimeout(() => {
      c.failed = true;
      c.body.destroy();
    }, CURSOR_IDLE_MS).unref();
  };
  if (at === target.length || c.body.readableEnded) {
    idleAfter();
    return Promise.resolve(at);
  }
  if (c.body.destroyed) {
    c.failed = true;
    return Promise.reject(new Error('the object store closed the body early'));
  }
  c.busy = true;
  return new Promise<number>((resolve, reject) => {
    const settle = (err: Error | null): void => {
      c.body.off('data', onData).off('end', onEnd).off('error', settle).off('close', onClose);
      c.body.pause();
      c.busy = false;
      idleAfter();
      if (err) {
        c.failed = true;
        reject(err);
      } else resolve(at);
    };
    const onData = (chunk: Buffer): void => {
      c.garbage(chunk.length);
      take(chunk);
      if (at === target.length) settle(null);
    };
    const onEnd = (): void => settle(null);
    const onClose = (): void => settle(c.body.readableEnded ? null : new Error('the object store closed the body early'));
    c.body.on('data', onData).on('end', onEnd).on('error', settle).on('close', onClose);
    c.body.resume();
  });
}

/** Downloads an object to a temp file under `tmpDir` for `fn`, and removes it once `fn` settles. */
export async function withLocalFile<T>(ctx: S3Ctx, tmpDir: string, key: BlobKey, fn: (p: string) => Promise<T>): Promise<T> {
  const body = await readRange(ctx, ctx.fileKey(key), `object ${key}`);
  await fs.promises.mkdir(tmpDir, { recursive: true });
  const file = path.join(tmpDir, `${key}.${randomBytes(6).toString('hex')}.get`);
  try {
    await pipeline(body, fs.createWriteStream(file, { flags: 'wx', mode: 0o600 }));
    return await fn(file);
  } finally {
    await fs.promises.rm(file, { force: true });
  }
}
