import {
  DeleteObjectsCommand, GetObjectCommand, ListMultipartUploadsCommand, ListObjectsV2Command, ListPartsCommand,
  PutObjectCommand,
} from '@aws-sdk/client-s3';
import { type BlobAppender, type BlobKey } from '../blob-store.ts';
import { BlobError } from '../../errors.ts';
import { createPartQueue } from './parts.ts';
import { readRange } from './read.ts';
import type { S3Ctx } from './writer.ts';

/**
 * A resumable object in S3 (a tus upload any node can continue), in the manner of tusd's s3store:
 * - a multipart upload on the object key it will be published under, holding full parts of
 *   partSize(n) bytes only, however the appends were cut, so MAX_PARTS hold every plan's cap;
 * - `resumable/<id>/key-<key>`, an empty object naming that key (made after the multipart upload);
 * - `resumable/<id>/tail-<start>-<end>`, the bytes past the last full part; the next append
 *   prepends them to its first part, and completion uploads them as the last part;
 * - `resumable/<id>/done-<size>`: the multipart upload was completed early, to be read as a source
 *   of join(); the object itself then holds the bytes.
 * The durable offset lives with the caller (PostgreSQL). Every append starts from it: parts whose end
 * lies past it, and tails other than the one ending at it, are what a crashed or refused append left,
 * and are overwritten or ignored. A tail is deleted only by a later append or completion, never by
 * the append that consumed it, so a crash in between cannot lose bytes below the durable offset.
 */
export interface ResumableState {
  readonly id: string;
  readonly key: BlobKey;
  readonly uploadId: string | null;
  /** Parts 1..n that fit under `upto`, with their ends. */
  readonly parts: readonly { PartNumber: number; ETag: string; size: number; end: number; modified: number }[];
  /** Every part the upload holds, in order, gaps and all: radosgw completes an upload only with all of them. */
  readonly allPartList: readonly { PartNumber: number; ETag: string }[];
  readonly tails: readonly { start: number; end: number; objectKey: string; modified: number }[];
  readonly done: number | null;
  readonly objects: readonly { objectKey: string; modified: number }[];
}

export const resumablePrefix = (ctx: S3Ctx, id: string): string => `${ctx.prefix}resumable/${id}/`;

export async function loadResumable(ctx: S3Ctx, id: string): Promise<ResumableState> {
  const prefix = resumablePrefix(ctx, id);
  const listed = await ctx.client.send(new ListObjectsV2Command({ Bucket: ctx.bucket, Prefix: prefix }));
  const objects = (listed.Contents ?? []).map((o) => ({ objectKey: o.Key!, modified: o.LastModified?.getTime() ?? 0 }));
  let key: string | null = null;
  let done: number | null = null;
  const tails: ResumableState['tails'][number][] = [];
  for (const o of objects) {
    const name = o.objectKey.slice(prefix.length);
    let m: RegExpExecArray | null;
    if ((m = /^key-([0-9a-f]{32})$/.exec(name))) key = m[1]!;
    else if ((m = /^done-(\d+)$/.exec(name))) done = Number(m[1]);
    else if ((m = /^tail-(\d+)-(\d+)$/.exec(name))) tails.push({ start: Number(m[1]), end: Number(m[2]), objectKey: o.objectKey, modified: o.modified });
  }
  if (key === null) throw new BlobError('NOT_FOUND', `resumable ${id} does not exist`);
  const uploadId = done === null ? await findUpload(ctx, ctx.fileKey(key)) : null;
  const parts: ResumableState['parts'][number][] = [];
  const allPartList: { PartNumber: number; ETag: string }[] = [];
  if (uploadId) {
    let marker: string | undefined;
    let end = 0;
    do {
      const r = await ctx.client.send(new ListPartsCommand({ Bucket: ctx.bucket, Key: ctx.fileKey(key), UploadId: uploadId, PartNumberMarker: marker }));
      for (const p of r.Parts ?? []) {
        allPartList.push({ PartNumber: p.PartNumber!, ETag: p.ETag ?? '' });
        // Parts must run 1, 2, 3 … to count; anything after a gap is a leftover.
        if (p.PartNumber !== parts.length + 1 || p.PartNumber !== allPartList.length) continue;
        end += p.Size ?? 0;
        parts.push({ PartNumber: p.PartNumber!, ETag: p.ETag ?? '', size: p.Size ?? 0, end, modified: p.LastModified?.getTime() ?? 0 });
      }
      marker = r.IsTruncated ? r.NextPartNumberMarker : undefined;
    } while (marker);
  }
  return { id, key, uploadId, parts, allPartList, tails, done, objects };
}

export async function findUpload(ctx: S3Ctx, objectKey: string): Promise<string | null> {
  const r = await ctx.client.send(new ListMultipartUploadsCommand({ Bucket: ctx.bucket, Prefix: objectKey }));
  const mine = (r.Uploads ?? []).filter((u) => u.Key === objectKey);
  mine.sort((a, b) => (b.Initiated?.getTime() ?? 0) - (a.Initiated?.getTime() ?? 0));
  return mine[0]?.UploadId ?? null;
}

/** Where `offset` falls: the parts below it and the tail [end of those parts, offset) it needs. */
export function locate(st: ResumableState, offset: number) {
  let k = 0;
  while (k < st.parts.length && st.parts[k]!.end <= offset) k++;
  const base = k === 0 ? 0 : st.parts[k - 1]!.end;
  const tail = offset === base ? null : (st.tails.find((t) => t.start === base && t.end === offset) ?? undefined);
  return { parts: st.parts.slice(0, k), base, tail };
}

export async function getBytes(ctx: S3Ctx, objectKey: string): Promise<Buffer> {
  const r = await ctx.client.send(new GetObjectCommand({ Bucket: ctx.bucket, Key: objectKey }));
  return Buffer.from(await r.Body!.transformToByteArray());
}

export async function deleteObjects(ctx: S3Ctx, keys: readonly string[]): Promise<void> {
  for (let i = 0; i < keys.length; i += 1000) {
    const batch = keys.slice(i, i + 1000);
    if (batch.length === 0) continue;
    await ctx.client.send(new DeleteObjectsCommand({ Bucket: ctx.bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } }));
  }
}

/**
 * Opens an append at the caller's durable `offset`. The needed tail is read into the first part,
 * stale tails are deleted first. finish() stores what is left past the last full part as the new
 * tail object, and resolves with the new durable offset.
 */
export async function openAppend(
  ctx: S3Ctx,
  st: ResumableState,
  offset: number,
  limit: number,
  release: () => void,
): Promise<BlobAppender> {
  if (!st.uploadId) throw new BlobError('OFFSET_MISMATCH', `resumable ${st.id} was already completed`);
  const at = locate(st, offset);
  if (at.tail === undefined) throw new BlobError('OFFSET_MISMATCH', `resumable ${st.id} holds no bytes up to offset ${offset}`);
  const stale = st.tails.filter((t) => t !== at.tail).map((t) => t.objectKey);
  await deleteObjects(ctx, stale);
  const uploadId = st.uploadId;
  let error: Error | null = null;
  let tooLarge: BlobError | null = null;
  let closed = false;
  const queue = createPartQueue({
    client: ctx.client, bucket: ctx.bucket, key: ctx.fileKey(st.key), uploadId: () => Promise.resolve(uploadId),
    firstPart: at.parts.length + 1,
    deadlineMs: ctx.deadlineMs,
    pool: ctx.pool,
    garbage: ctx.bodyGarbage,
    onError: (err) => (error ??= err),
  });
  // Streamed into the part buffer: a tail may be nearly a whole part (16 MiB), and a second copy of
  // it per append would be memory outside the pool's budget.
  if (at.tail) {
    try {
      for await (const chunk of await readRange(ctx, at.tail.objectKey, `tail of resumable ${st.id}`)) queue.write(chunk as Buffer);
    } catch (err) {
      queue.abort();
      throw err;
    }
  }
  const tailLen = at.tail ? at.tail.end - at.tail.start : 0;
  const close = () => {
    if (closed) return;
    closed = true;
    release();
  };
  return {
    offset,
    write(chunk) {
      if (closed || tooLarge) return true;
      const room = limit - (offset + queue.received() - tailLen);
      if (chunk.length > room) {
        // The chunk that crosses the limit is dropped whole; what came before it stays.
        tooLarge = new BlobError('TOO_LARGE', `resumable ${st.id} may hold at most ${limit} bytes`);
        return true;
      }
      return queue.write(chunk);
    },
    onDrain: (fn) => queue.onDrain(fn),
    async finish(opts = {}) {
      try {
        const written = offset + queue.received() - tailLen;
        const cutTo = Math.min(opts.cutTo ?? written, written);
        if (error || cutTo <= offset) {
          queue.abort();
          return { offset, error: error ?? tooLarge };
        }
        // cutTo inside the bytes still in memory shortens them; one inside an uploaded part cannot be
        // honoured, so the whole append is dropped instead (durable offset: where it started).
        const filled = queue.filling();
        if (written - cutTo > filled) {
          queue.abort();
          return { offset, error };
        }
        queue.shrink(filled - (written - cutTo));
        // Never a short part, even one S3 would take (MIN_PART): appends of a few MiB each would
        // then fill MAX_PARTS long before the largest cap. A tail is always shorter than the part it
        // would become, so a part a crashed append left past the durable offset never seems to end
        // below it.
        const tail = queue.takeFilling();
        const parts = await queue.settle();
        const end = at.base + parts.reduce((s, p) => s + p.size, 0) + tail.length;
        if (tail.length > 0) {
          const name = `${resumablePrefix(ctx, st.id)}tail-${end - tail.length}-${end}`;
          await ctx.client.send(new PutObjectCommand({ Bucket: ctx.bucket, Key: name, Body: tail, ContentLength: tail.length }));
        }
        return { offset: end, error: tooLarge };
      } catch (err) {
        queue.abort();
        return { offset, error: err as Error };
      } finally {
        close();
      }
    },
    abort() {
      queue.abort();
      close();
    },
  };
}
