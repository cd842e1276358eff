import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { type BlobKey, type BlobReader } from '../blob-store.ts';
import { BlobError, isBlobError } from '../../errors.ts';
import { mapNotFound, s3Status } from './client.ts';
import { getBody, signGet, type BodyFeed } from './get.ts';
import type { S3Ctx } from './writer.ts';

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
 * A GET of at least this many bytes goes over a socket of its own (getBody), where reading costs a
 * fraction of the CPU; a shorter one through the SDK, whose kept-alive connections spare it a new
 * connection (and, over TLS, a handshake) per small file or zip entry.
 */
export const SOCKET_GET_MIN_BYTES = 4 * 1024 * 1024;

/**
 * A random reader that is cheap when read in order, as downloads and zips read: one GET from the
 * position asked to the object's end serves every read that continues where the last one stopped,
 * and between reads it is paused, so what it holds is the socket's buffers (TCP backpressure, no
 * read-ahead in memory). A read elsewhere moves that GET; one that overlaps a read in progress is a
 * ranged GET of its own.
 */
export async function openReader(ctx: S3Ctx, key: BlobKey, knownSize?: number): Promise<BlobReader> {
  const objectKey = ctx.fileKey(key);
  const what = `object ${key}`;
  const size = knownSize ?? (await objectSize(ctx, objectKey, what));
  const ac = new AbortController();
  let cursor: Cursor | null = null;
  let opening = false;
  let closed = false;
  const getRange = async (pos: number, end: number): Promise<BodyFeed> => {
    if (end - pos >= SOCKET_GET_MIN_BYTES) {
      const body = await getBody(await signGet(ctx.client, ctx.bucket, objectKey), pos, end, what, ctx.deadlineMs, ac.signal);
      if (closed) body.destroy();
      return body;
    }
    try {
      const r = await ctx.client.send(
        new GetObjectCommand({ Bucket: ctx.bucket, Key: objectKey, Range: `bytes=${pos}-${end - 1}` }),
        { abortSignal: ac.signal },
      );
      return readableFeed(r.Body as Readable, ctx.bodyGarbage);
    } catch (err) {
      throw mapNotFound(err, what);
    }
  };
  // A size taken on trust (the row's) that the object does not reach is the object ending early.
  const get = (pos: number, end: number): Promise<BodyFeed> =>
    getRange(pos, end).catch((err: unknown) => {
      if (knownSize !== undefined && (isBlobError(err, 'OUT_OF_RANGE') || s3Status(err).status === 416)) {
        throw new BlobError('SHORT', `${what} ends before byte ${pos}, though ${knownSize} bytes were expected`, { cause: err });
      }
      throw err;
    });
  return {
    size,
    async readInto(target, pos) {
      if (target.length === 0) return;
      if (pos + target.length > size) throw new BlobError('SHORT', `${what} holds ${size} bytes, asked up to ${pos + target.length}`);
      let got: number;
      if (opening || cursor?.busy) {
        const feed = await get(pos, pos + target.length);
        got = await fill(createCursor(feed, pos), target).finally(() => feed.destroy());
      } else {
        if (!cursor || !cursor.feed.usable || cursor.pos !== pos) {
          cursor?.feed.destroy();
          cursor = null;
          opening = true;
          try {
            cursor = createCursor(await get(pos, size), pos);
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
      cursor?.feed.destroy();
      cursor = null;
    },
  };
}

/**
 * A reader's GET left unread this long is closed (the next read opens another): a client that stopped
 * reading must not keep a connection to the store.
 */
const CURSOR_IDLE_MS = 1000;

/** A GET's body being read in order: where it stands. */
interface Cursor {
  readonly feed: BodyFeed;
  pos: number;
  busy: boolean;
  idle: NodeJS.Timeout | null;
}

const createCursor = (feed: BodyFeed, pos: number): Cursor => ({ feed, pos, busy: false, idle: null });

/** Copies the cursor's next bytes into `target`; resolves with how many (short only at the body's end). */
async function fill(c: Cursor, target: Buffer): Promise<number> {
  if (c.idle) clearTimeout(c.idle);
  c.busy = true;
  try {
    const n = await c.feed.fill(target);
    c.pos += n;
    return n;
  } finally {
    c.busy = false;
    c.idle = setTimeout(() => c.feed.destroy(), CURSOR_IDLE_MS).unref();
  }
}

/** An SDK response body as a BodyFeed: paused between fills, each chunk copied out and counted as garbage. */
function readableFeed(body: Readable, garbage: (bytes: number) => void): BodyFeed {
  let rest: Buffer | null = null;
  let failed = false;
  body.pause();
  body.on('error', () => (failed = true));
  return {
    get usable() {
      return !failed && !(body.destroyed && !body.readableEnded);
    },
    destroy: () => body.destroy(),
    fill(target) {
      let at = 0;
      const take = (chunk: Buffer): void => {
        const n = chunk.copy(target, at);
        at += n;
        rest = n < chunk.length ? chunk.subarray(n) : null;
      };
      if (rest) take(rest);
      if (at === target.length || body.readableEnded) return Promise.resolve(at);
      if (body.destroyed) {
        failed = true;
        return Promise.reject(new Error('the object store closed the body early'));
      }
      return new Promise<number>((resolve, reject) => {
        const settle = (err: Error | null): void => {
          body.off('data', onData).off('end', onEnd).off('error', settle).off('close', onClose);
          body.pause();
          if (err) {
            failed = true;
            reject(err);
          } else resolve(at);
        };
        const onData = (chunk: Buffer): void => {
          garbage(chunk.length);
          take(chunk);
          if (at === target.length) settle(null);
        };
        const onEnd = (): void => settle(null);
        const onClose = (): void => settle(body.readableEnded ? null : new Error('the object store closed the body early'));
        body.on('data', onData).on('end', onEnd).on('error', settle).on('close', onClose);
        body.resume();
      });
    },
  };
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
