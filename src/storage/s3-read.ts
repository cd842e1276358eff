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

/** A random reader: each readInto() is one ranged GET whose body is copied straight into the target. */
export async function openReader(ctx: S3Ctx, key: BlobKey): Promise<BlobReader> {
  const objectKey = ctx.fileKey(key);
  const what = `object ${key}`;
  const size = await objectSize(ctx, objectKey, what);
  const ac = new AbortController();
  return {
    size,
    async readInto(target, pos) {
      if (target.length === 0) return;
      if (pos + target.length > size) throw new BlobError('SHORT', `${what} holds ${size} bytes, asked up to ${pos + target.length}`);
      let at = 0;
      try {
        const r = await ctx.client.send(
          new GetObjectCommand({ Bucket: ctx.bucket, Key: objectKey, Range: `bytes=${pos}-${pos + target.length - 1}` }),
          { abortSignal: ac.signal },
        );
        for await (const chunk of r.Body as Readable) {
          const b = chunk as Buffer;
          const n = Math.min(b.length, target.length - at);
          b.copy(target, at, 0, n);
          at += n;
        }
      } catch (err) {
        throw mapNotFound(err, what);
      }
      if (at < target.length) throw new BlobError('SHORT', `${what} ended at ${pos + at}, asked up to ${pos + target.length}`);
    },
    close: () => ac.abort(),
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
