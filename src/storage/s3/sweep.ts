import {
  AbortMultipartUploadCommand, ListMultipartUploadsCommand, ListObjectsV2Command, ListPartsCommand, type _Object,
} from '@aws-sdk/client-s3';
import { BLOB_KEY_RE, type BlobKey, type Leftover } from '../blob-store.ts';
import { deleteObjects } from './append.ts';
import type { S3Ctx } from './writer.ts';

/** Every object under `prefix`, a page (up to 1,000) at a time. */
export async function* listPages(ctx: S3Ctx, prefix: string): AsyncGenerator<_Object[]> {
  let token: string | undefined;
  do {
    const r = await ctx.client.send(new ListObjectsV2Command({ Bucket: ctx.bucket, Prefix: prefix, ContinuationToken: token }));
    yield r.Contents ?? [];
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
  } while (token);
}

async function listUploads(ctx: S3Ctx): Promise<{ Key: string; UploadId: string; initiated: number }[]> {
  const out: { Key: string; UploadId: string; initiated: number }[] = [];
  let keyMarker: string | undefined;
  let idMarker: string | undefined;
  do {
    const r = await ctx.client.send(new ListMultipartUploadsCommand({
      Bucket: ctx.bucket, Prefix: `${ctx.prefix}files/`, KeyMarker: keyMarker, UploadIdMarker: idMarker,
    }));
    for (const u of r.Uploads ?? []) out.push({ Key: u.Key!, UploadId: u.UploadId!, initiated: u.Initiated?.getTime() ?? 0 });
    keyMarker = r.IsTruncated ? r.NextKeyMarker : undefined;
    idMarker = r.IsTruncated ? r.NextUploadIdMarker : undefined;
  } while (keyMarker);
  return out;
}

/** When a multipart upload last took a part (its start if none): a 100 GiB upload is old but not idle. */
async function lastWritten(ctx: S3Ctx, u: { Key: string; UploadId: string; initiated: number }): Promise<number> {
  let last = u.initiated;
  let marker: string | undefined;
  do {
    const r = await ctx.client.send(new ListPartsCommand({ Bucket: ctx.bucket, Key: u.Key, UploadId: u.UploadId, PartNumberMarker: marker }));
    for (const p of r.Parts ?? []) last = Math.max(last, p.LastModified?.getTime() ?? 0);
    marker = r.IsTruncated ? r.NextPartNumberMarker : undefined;
  } while (marker);
  return last;
}

/**
 * Leftovers: incomplete multipart uploads that are neither a resumable's nor a live writer's of this
 * process ('temp', id `objectKey uploadId`), and resumables (by id), each idle for `idleMs`.
 */
export async function listLeftovers(ctx: S3Ctx, idleMs: number): Promise<Leftover[]> {
  const now = Date.now();
  const resumables = new Map<string, { key: string | null; last: number }>();
  const rp = `${ctx.prefix}resumable/`;
  for await (const page of listPages(ctx, rp)) {
    for (const o of page) {
      const [id, name] = o.Key!.slice(rp.length).split('/');
      if (!id || !name) continue;
      const r = resumables.get(id) ?? { key: null, last: 0 };
      r.last = Math.max(r.last, o.LastModified?.getTime() ?? 0);
      if (name.startsWith('key-')) r.key = name.slice(4);
      resumables.set(id, r);
    }
  }
  const owner = new Map<string, string>();
  for (const [id, r] of resumables) if (r.key) owner.set(ctx.fileKey(r.key), id);
  const out: Leftover[] = [];
  for (const u of await listUploads(ctx)) {
    const id = owner.get(u.Key);
    if (id !== undefined) {
      const r = resumables.get(id)!;
      r.last = Math.max(r.last, now - r.last >= idleMs ? await lastWritten(ctx, u) : now);
      continue;
    }
    if (ctx.ownUploads.has(u.Key) || now - u.initiated < idleMs) continue;
    const idle = now - (await lastWritten(ctx, u));
    if (idle >= idleMs) out.push({ kind: 'temp', id: `${u.Key} ${u.UploadId}`, idleMs: idle });
  }
  for (const [id, r] of resumables) {
    if (now - r.last >= idleMs) out.push({ kind: 'resumable', id, idleMs: now - r.last });
  }
  return out;
}

export async function abortTemp(ctx: S3Ctx, id: string): Promise<void> {
  const [Key, UploadId] = id.split(' ');
  await ctx.client.send(new AbortMultipartUploadCommand({ Bucket: ctx.bucket, Key, UploadId })).catch(() => {});
}

export async function* listKeys(ctx: S3Ctx, olderThanMs: number): AsyncGenerator<readonly BlobKey[]> {
  const fp = `${ctx.prefix}files/`;
  const before = Date.now() - olderThanMs;
  for await (const page of listPages(ctx, fp)) {
    const keys = page
      .filter((o) => (o.LastModified?.getTime() ?? 0) <= before)
      .map((o) => o.Key!.slice(fp.length))
      .filter((k) => BLOB_KEY_RE.test(k));
    if (keys.length > 0) yield keys;
  }
}

/** Deletes cache entries owned by `key` (names starting with it). */
export async function dropOwnedCache(ctx: S3Ctx, key: BlobKey): Promise<void> {
  for await (const page of listPages(ctx, `${ctx.prefix}cache/${key}`)) await deleteObjects(ctx, page.map((o) => o.Key!));
}
