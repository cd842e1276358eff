import { createHash, type Hash } from 'node:crypto';
import { crc32 } from '../../util/crc32.mjs';
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand,
  PutObjectCommand, type S3Client,
} from '@aws-sdk/client-s3';
import { type BlobDigest, type BlobKey, type BlobWriter, type WriteOptions } from '../blob-store.ts';
import { BlobError } from '../../errors.ts';
import type { ByteBudget, PartPool } from './part-pool.ts';
import { createPartQueue } from './parts.ts';
import { unmapNow } from '../../util/spare-buffers.ts';

/** What every part of the S3 store shares: the client, the bucket and where things live in it. */
export interface S3Ctx {
  readonly client: S3Client;
  readonly bucket: string;
  /** '' or the STORAGE_URL prefix, ending in '/'. */
  readonly prefix: string;
  /** Object key of a published object. */
  readonly fileKey: (key: BlobKey) => string;
  /**
   * Multipart uploads this process started and has not completed or aborted, by object key: a live
   * writer's are never leftovers, and removeOwnTemps() aborts what is left at shutdown.
   */
  readonly ownUploads: Map<string, Promise<string>>;
  /** Part buffers of every writer and append, bounded together. */
  readonly pool: PartPool;
  /** What small objects may hold between finish() and publish(), together. */
  readonly held: ByteBudget;
  /** Told the bytes of every object body read, which the HTTP client allocated and the reader copied out. */
  readonly bodyGarbage: (bytes: number) => void;
  /** What one store call may take (REQUEST_TIMEOUT_MS unless a test shortens it): reads fail once silent this long. */
  readonly deadlineMs: number;
}

/** Starts a multipart upload on `objectKey`, remembered in ownUploads until it is completed or aborted. */
export function startUpload(ctx: S3Ctx, objectKey: string): Promise<string> {
  const p = ctx.client
    .send(new CreateMultipartUploadCommand({ Bucket: ctx.bucket, Key: objectKey }))
    .then((r) => r.UploadId!);
  p.catch(() => ctx.ownUploads.delete(objectKey));
  ctx.ownUploads.set(objectKey, p);
  return p;
}

export async function abortUpload(ctx: S3Ctx, objectKey: string, uploadId: Promise<string> | string): Promise<void> {
  ctx.ownUploads.delete(objectKey);
  const id = await Promise.resolve(uploadId).catch(() => null);
  if (id) await ctx.client.send(new AbortMultipartUploadCommand({ Bucket: ctx.bucket, Key: objectKey, UploadId: id })).catch(() => {});
}

/**
 * A BlobWriter into S3. The bytes stream into a multipart upload created with the first full part,
 * so the object exists only once CompleteMultipartUpload runs (publish). An object smaller than one
 * part is held, copied at its own size, and written by one PutObject at publish, while the small
 * objects held by the process fit S3Ctx.held; past that it goes up in finish(), as the one part of
 * a multipart upload, so a request of thousands of small files never holds them all in memory.
 * abort() cancels the parts in flight and aborts the upload; what a crash leaves is an incomplete
 * multipart upload, which listLeftovers() reports once idle.
 */
export function createS3Writer(ctx: S3Ctx, key: BlobKey, opts: WriteOptions = {}): BlobWriter {
  const objectKey = ctx.fileKey(key);
  let uploadId: Promise<string> | null = null;
  let crc = 0;
  const sha: Hash | null = opts.sha256 ? createHash('sha256') : null;
  let state: 'open' | 'finishing' | 'finished' | 'published' | 'aborted' = 'open';
  /** The bytes of an object too small for a multipart upload, held until publish (charged to ctx.held). */
  let small: Buffer | null = null;
  /** `sent`: its PutObject is over, so its memory goes back now (an aborted one may still be sending it). */
  const drop = (sent = false) => {
    if (small) ctx.held.give(small.length);
    if (small && sent) unmapNow(small);
    small = null;
  };
  let parts: { PartNumber: number; ETag: string }[] = [];
  let firstError: Error | null = null;
  let aborting: Promise<void> = Promise.resolve();
  const queue = createPartQueue({
    client: ctx.client,
    bucket: ctx.bucket,
    key: objectKey,
    uploadId: () => (uploadId ??= startUpload(ctx, objectKey)),
    firstPart: 1,
    deadlineMs: ctx.deadlineMs,
    pool: ctx.pool,
    garbage: ctx.bodyGarbage,
    onError: (err) => {
      if (firstError || state === 'aborted') return;
      firstError = err;
      opts.onError?.(err);
    },
  });

  return {
    key,
    write(chunk) {
      if (state !== 'open') return true;
      crc = crc32(chunk, crc);
      sha?.update(chunk);
      return queue.write(chunk);
    },
    onDrain: (fn) => queue.onDrain(fn),
    holding: () => false,
    async finish(): Promise<BlobDigest> {
      if (state === 'aborted') throw new BlobError('ABORTED', 'the writer was aborted');
      state = 'finishing';
      if (queue.cut() === 0 && ctx.held.take(queue.filling())) small = queue.takeFilling();
      else {
        queue.flush();
        parts = (await queue.settle()).map((p) => ({ PartNumber: p.PartNumber, ETag: p.ETag }));
      }
      if ((state as string) === 'aborted') throw new BlobError('ABORTED', 'the writer was aborted');
      state = 'finished';
      return { size: queue.received(), crc32: crc >>> 0, sha256: sha ? sha.digest('hex') : null };
    },
    async publish() {
      if (state !== 'finished') throw new Error(`publish() before finish() resolved (state ${state})`);
      if (small) {
        await ctx.client.send(new PutObjectCommand({ Bucket: ctx.bucket, Key: objectKey, Body: small, ContentLength: small.length }));
        drop(true);
      } else {
        // radosgw answers an empty ETag here: nothing downstream relies on it.
        await ctx.client.send(new CompleteMultipartUploadCommand({
          Bucket: ctx.bucket, Key: objectKey, UploadId: await uploadId!, MultipartUpload: { Parts: parts },
        }));
        ctx.ownUploads.delete(objectKey);
      }
      if ((state as string) === 'aborted') {
        await ctx.client.send(new DeleteObjectCommand({ Bucket: ctx.bucket, Key: objectKey })).catch(() => {});
        throw new BlobError('ABORTED', 'the writer was aborted');
      }
      state = 'published';
    },
    abort() {
      if (state === 'aborted') return aborting;
      const wasPublished = state === 'published';
      state = 'aborted';
      drop();
      queue.abort();
      aborting = Promise.all([
        uploadId ? abortUpload(ctx, objectKey, uploadId) : null,
        wasPublished ? ctx.client.send(new DeleteObjectCommand({ Bucket: ctx.bucket, Key: objectKey })).catch(() => {}) : null,
      ]).then(() => {});
      return aborting;
    },
  };
}
