import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { crc32 } from '../../util/crc32.mjs';
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand,
  ListMultipartUploadsCommand, ListObjectsV2Command, PutObjectCommand, UploadPartCopyCommand,
} from '@aws-sdk/client-s3';
import { type AppendOptions, type BlobAppender, type BlobDigest, type BlobKey } from '../blob-store.ts';
import { uploadOnePart } from './put-part.ts';
import { BlobError } from '../../errors.ts';
import { deleteObjects, findUpload, getBytes, loadResumable, locate, openAppend, resumablePrefix, type ResumableState } from './append.ts';
import { objectSize, readRange } from './read.ts';
import { createDigestsAhead } from './digest-ahead.ts';
import type { S3Ctx } from './writer.ts';

const EMPTY = new Uint8Array(0);
/** The largest range one UploadPartCopy takes. */
const MAX_COPY = 5 * 1024 ** 3;

/** The resumable half of the S3 store (see s3-append.ts for the layout in the bucket). */
export function createS3Resumables(ctx: S3Ctx, newKey: () => BlobKey) {
  const busy = new Set<string>();
  const digests = createDigestsAhead();

  const create = async (id: string, key: BlobKey = newKey()): Promise<void> => {
    const prefix = resumablePrefix(ctx, id);
    // Exclusive against a repeated id; not against a race, which the caller's random ids rule out
    // (radosgw 16 ignores If-None-Match on PutObject, so the check cannot be one request).
    const listed = await ctx.client.send(new ListObjectsV2Command({ Bucket: ctx.bucket, Prefix: prefix, MaxKeys: 1 }));
    if ((listed.KeyCount ?? 0) > 0) throw new Error(`resumable ${id} already exists`);
    // The multipart upload first: a marker always names one, and a crash in between leaves only an
    // incomplete upload, which the sweeper aborts.
    await ctx.client.send(new CreateMultipartUploadCommand({ Bucket: ctx.bucket, Key: ctx.fileKey(key) }));
    try {
      await ctx.client.send(new PutObjectCommand({ Bucket: ctx.bucket, Key: `${prefix}key-${key}`, Body: EMPTY, ContentLength: 0 }));
    } catch (err) {
      await abortAll(ctx.fileKey(key));
      throw err;
    }
  };

  const abortAll = async (objectKey: string) => {
    const r = await ctx.client.send(new ListMultipartUploadsCommand({ Bucket: ctx.bucket, Prefix: objectKey }));
    for (const u of r.Uploads ?? []) {
      if (u.Key !== objectKey) continue;
      await ctx.client.send(new AbortMultipartUploadCommand({ Bucket: ctx.bucket, Key: objectKey, UploadId: u.UploadId })).catch(() => {});
    }
  };

  const append = async (id: string, offset: number, opts: AppendOptions): Promise<BlobAppender> => {
    if (busy.has(id)) throw new BlobError('BUSY', `resumable ${id} is being appended to`);
    busy.add(id);
    try {
      const st = await loadResumable(ctx, id);
      const appender = await openAppend(ctx, st, offset, opts.limit, () => busy.delete(id));
      return opts.hashAhead ? digests.feed(id, appender) : appender;
    } catch (err) {
      busy.delete(id);
      throw err;
    }
  };

  /** Completes the multipart upload with the first `size` bytes: the parts below it, then its tail as the last part. */
  const completeParts = async (st: ResumableState, size: number): Promise<void> => {
    const at = locate(st, size);
    if (!st.uploadId || at.tail === undefined) {
      throw new BlobError('SHORT', `resumable ${st.id} holds fewer than ${size} bytes`);
    }
    const objectKey = ctx.fileKey(st.key);
    const tail = at.tail ? await getBytes(ctx, at.tail.objectKey) : null;
    // Parts past those below `size` that the tail (as the next part) does not replace.
    if (st.allPartList.length - at.parts.length - (tail ? 1 : 0) > 0) {
      await completeAround(st, at.base, tail);
      return;
    }
    const parts = at.parts.map((p) => ({ PartNumber: p.PartNumber, ETag: p.ETag }));
    if (tail) {
      const n = parts.length + 1;
      parts.push({ PartNumber: n, ETag: await uploadOnePart(ctx.client, ctx.bucket, objectKey, st.uploadId, n, tail, ctx.deadlineMs) });
    }
    if (parts.length === 0) {
      // S3 completes no upload without a part: an empty object is written whole.
      await ctx.client.send(new PutObjectCommand({ Bucket: ctx.bucket, Key: objectKey, Body: EMPTY, ContentLength: 0 }));
      await abortAll(objectKey);
      return;
    }
    await ctx.client.send(new CompleteMultipartUploadCommand({ Bucket: ctx.bucket, Key: objectKey, UploadId: st.uploadId, MultipartUpload: { Parts: parts } }));
  };

  /**
   * Parts past the durable offset are left (a crashed or refused append), and radosgw completes an
   * upload only with every part it holds. So the upload is completed whole, and its first `base`
   * bytes are copied inside the bucket (UploadPartCopy, nothing through this node) into a new upload
   * on the same key, followed by the tail; that second completion replaces the first. No row names
   * the key yet, so nobody reads the object in between.
   */
  const completeAround = async (st: ResumableState, base: number, tail: Buffer | null): Promise<void> => {
    const objectKey = ctx.fileKey(st.key);
    const all = st.allPartList.map((p) => ({ PartNumber: p.PartNumber, ETag: p.ETag }));
    await ctx.client.send(new CompleteMultipartUploadCommand({ Bucket: ctx.bucket, Key: objectKey, UploadId: st.uploadId!, MultipartUpload: { Parts: all } }));
    if (base === 0) {
      const body = tail ?? EMPTY;
      await ctx.client.send(new PutObjectCommand({ Bucket: ctx.bucket, Key: objectKey, Body: body, ContentLength: body.length }));
      return;
    }
    const uploadId = (await ctx.client.send(new CreateMultipartUploadCommand({ Bucket: ctx.bucket, Key: objectKey }))).UploadId!;
    const parts: { PartNumber: number; ETag: string }[] = [];
    const pieces = Math.ceil(base / MAX_COPY);
    for (let i = 0; i < pieces; i++) {
      const from = Math.floor((base * i) / pieces);
      const to = Math.floor((base * (i + 1)) / pieces);
      const r = await ctx.client.send(new UploadPartCopyCommand({
        Bucket: ctx.bucket, Key: objectKey, UploadId: uploadId, PartNumber: i + 1,
        CopySource: `${ctx.bucket}/${encodeURIComponent(objectKey)}`, CopySourceRange: `bytes=${from}-${to - 1}`,
      }));
      parts.push({ PartNumber: i + 1, ETag: r.CopyPartResult?.ETag ?? '' });
    }
    if (tail) {
      const n = parts.length + 1;
      parts.push({ PartNumber: n, ETag: await uploadOnePart(ctx.client, ctx.bucket, objectKey, uploadId, n, tail, ctx.deadlineMs) });
    }
    await ctx.client.send(new CompleteMultipartUploadCommand({ Bucket: ctx.bucket, Key: objectKey, UploadId: uploadId, MultipartUpload: { Parts: parts } }));
  };

  const complete = async (id: string, size: number): Promise<{ key: BlobKey; digest: BlobDigest }> => {
    const st = await loadResumable(ctx, id);
    if (st.done === null) await completeParts(st, size);
    else if (st.done < size) throw new BlobError('SHORT', `resumable ${id} holds ${st.done} bytes, fewer than ${size}`);
    // Its CRC taken as the bytes came, when this process made every append and saw each one's end
    // recorded; else read back.
    const objectKey = ctx.fileKey(st.key);
    const ahead = digests.take(id, size);
    const digest = ahead ?? (await digestObject(await readRange(ctx, objectKey, `object ${st.key}`, { end: size })));
    const stored = ahead ? await objectSize(ctx, objectKey, `object ${st.key}`) : digest.size;
    if (stored !== size) throw new BlobError('SHORT', `object ${st.key} holds ${stored} bytes, expected ${size}`);
    await deleteObjects(ctx, st.objects.map((o) => o.objectKey));
    return { key: st.key, digest };
  };

  /** Streams `body` into a fresh append at `offset` and returns the new durable offset. */
  const pour = async (id: string, offset: number, body: Readable): Promise<number> => {
    const ap = await append(id, offset, { limit: Number.MAX_SAFE_INTEGER, hashAhead: true });
    try {
      for await (const chunk of body) {
        if (!ap.write(chunk as Buffer)) await new Promise<void>((r) => ap.onDrain(r));
      }
    } catch (err) {
      ap.abort();
      throw err;
    }
    const r = await ap.finish();
    if (r.error) throw r.error;
    digests.confirm(id, r.offset); // nobody else appends to a resumable being joined or reopened
    return r.offset;
  };

  /** A source of join(): completed into its object (once), then read from there. */
  const sourceBytes = async (sourceId: string, length: number): Promise<Readable> => {
    const st = await loadResumable(ctx, sourceId);
    if (st.done === null) {
      await completeParts(st, length);
      await ctx.client.send(new PutObjectCommand({ Bucket: ctx.bucket, Key: `${resumablePrefix(ctx, sourceId)}done-${length}`, Body: EMPTY, ContentLength: 0 }));
    } else if (st.done < length) {
      throw new BlobError('SHORT', `resumable ${sourceId} holds ${st.done} bytes, fewer than ${length}`);
    }
    return readRange(ctx, ctx.fileKey(st.key), `resumable ${sourceId}`, { end: length });
  };

  return {
    create: (id: string) => create(id),
    append,
    complete,
    recorded: (id: string, offset: number) => digests.confirm(id, offset),
    async join(id: string, sources: ReadonlyArray<{ readonly id: string; readonly length: number }>): Promise<void> {
      let offset = 0;
      for (const s of sources) offset = await pour(id, offset, await sourceBytes(s.id, s.length));
    },
    /** Copies the published object back into a fresh resumable under `id`, then deletes it. */
    async reopen(id: string, key: BlobKey): Promise<void> {
      await create(id);
      await pour(id, 0, await readRange(ctx, ctx.fileKey(key), `object ${key}`));
      await ctx.client.send(new DeleteObjectCommand({ Bucket: ctx.bucket, Key: ctx.fileKey(key) }));
    },
    async remove(id: string): Promise<void> {
      digests.forget(id);
      let st: ResumableState;
      try {
        st = await loadResumable(ctx, id);
      } catch (err) {
        if (err instanceof BlobError && err.code === 'NOT_FOUND') return;
        throw err;
      }
      const objectKey = ctx.fileKey(st.key);
      if (st.done !== null) await ctx.client.send(new DeleteObjectCommand({ Bucket: ctx.bucket, Key: objectKey }));
      else if (await findUpload(ctx, objectKey)) await abortAll(objectKey);
      await deleteObjects(ctx, st.objects.map((o) => o.objectKey));
    },
  };
}

export async function digestObject(body: Readable): Promise<BlobDigest> {
  const sha = createHash('sha256');
  let crc = 0;
  let size = 0;
  for await (const chunk of body) {
    const b = chunk as Buffer;
    crc = crc32(b, crc);
    sha.update(b);
    size += b.length;
  }
  return { size, crc32: crc >>> 0, sha256: sha.digest('hex') };
}
