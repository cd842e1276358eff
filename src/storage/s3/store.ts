import path from 'node:path';
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { S3Location } from '../../config.ts';
import { randomHex } from '../../util/random.ts';
import { createGarbageMeter, createOldCollector } from '../../util/gc.ts';
import { BLOB_KEY_RE, type BlobCache, type BlobKey, type BlobStore, type BlobWriter, type WriteOptions } from '../blob-store.ts';
import { deleteObjects } from './append.ts';
import { checkBucket, createS3Client, isNotFound, REQUEST_TIMEOUT_MS } from './client.ts';
import { createByteBudget, createPartPool } from './part-pool.ts';
import { openReader, readRange, withLocalFile } from './read.ts';
import { createS3Resumables } from './resumable.ts';
import { abortTemp, dropOwnedCache, listKeys, listLeftovers, listPages } from './sweep.ts';
import { abortUpload, createS3Writer, type S3Ctx } from './writer.ts';

export interface S3Store extends BlobStore {
  /**
   * A writer under a key made elsewhere: `sluice storage migrate` copies a disk store's objects under
   * the keys their rows already name. Same writer as createWriter(); the caller owns the key's uniqueness.
   */
  writerAt(key: BlobKey, opts?: WriteOptions): BlobWriter;
}

/**
 * The blob store on an S3-compatible bucket (selected by STORAGE_URL=s3://BUCKET[/PREFIX]). Under
 * the prefix: `files/<key>` published objects (and the multipart uploads that become them),
 * `resumable/<id>/` the state of resumable uploads, `cache/` derived files. Nothing lives on the
 * node's disk but temp downloads for withLocalFile, so any node can serve and continue anything.
 */
export async function createS3Store(o: {
  location: S3Location;
  tmpDir: string;
  client?: S3Client;
  /** Start-up checks of the bucket (checkBucket); off for a second store on a bucket already checked. */
  check?: boolean;
  /** What one call may take (REQUEST_TIMEOUT_MS). */
  deadlineMs?: number;
}): Promise<S3Store> {
  const deadlineMs = o.deadlineMs ?? REQUEST_TIMEOUT_MS;
  const client = o.client ?? createS3Client(o.location, deadlineMs);
  if (o.check !== false) {
    try {
      await checkBucket(client, o.location);
    } catch (err) {
      if (!o.client) client.destroy();
      throw err;
    }
  }
  const prefix = o.location.prefix;
  const ctx: S3Ctx = {
    client,
    bucket: o.location.bucket,
    prefix,
    fileKey: (key) => `${prefix}files/${key}`,
    ownUploads: new Map(),
    pool: createPartPool(o.location.partBufferBytes, createOldCollector(10_000)),
    held: createByteBudget(o.location.partBufferBytes),
    bodyGarbage: createGarbageMeter(1024 * 1024),
    deadlineMs,
  };
  const newKey = () => randomHex(16);
  const resumables = createS3Resumables(ctx, newKey);
  const cacheKey = (name: string) => {
    if (!/^[A-Za-z0-9._/-]+$/.test(name) || name.split('/').includes('..')) throw new Error(`bad cache name ${JSON.stringify(name)}`);
    return `${prefix}cache/${name}`;
  };

  const cache: BlobCache = {
    async get(name) {
      try {
        const r = await client.send(new GetObjectCommand({ Bucket: ctx.bucket, Key: cacheKey(name) }));
        return Buffer.from(await r.Body!.transformToByteArray());
      } catch (err) {
        if (isNotFound(err)) return null;
        throw err;
      }
    },
    async put(name, bytes) {
      // A PutObject replaces an object atomically: readers see the old bytes or the new ones.
      await client.send(new PutObjectCommand({ Bucket: ctx.bucket, Key: cacheKey(name), Body: bytes, ContentLength: bytes.length }));
    },
    async prune(maxAgeMs) {
      const before = Date.now() - maxAgeMs;
      const cp = `${prefix}cache/`;
      let removed = 0;
      for await (const page of listPages(ctx, cp)) {
        const old: string[] = [];
        for (const obj of page) {
          if ((obj.LastModified?.getTime() ?? 0) > before) continue;
          const owner = obj.Key!.slice(cp.length, cp.length + 32);
          if (BLOB_KEY_RE.test(owner) && (await exists(ctx.fileKey(owner)))) continue;
          old.push(obj.Key!);
        }
        await deleteObjects(ctx, old);
        removed += old.length;
      }
      return removed;
    },
  };

  const exists = async (objectKey: string) => {
    try {
      await client.send(new HeadObjectCommand({ Bucket: ctx.bucket, Key: objectKey }));
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  };

  return {
    newKey,
    createWriter: (opts) => createS3Writer(ctx, newKey(), opts),
    writerAt(key, opts) {
      if (!BLOB_KEY_RE.test(key)) throw new Error(`invalid storage key ${JSON.stringify(key)}`);
      return createS3Writer(ctx, key, opts);
    },
    createResumable: (id) => resumables.create(id),
    append: (id, offset, opts) => resumables.append(id, offset, opts),
    join: (id, sources) => resumables.join(id, sources),
    completeResumable: (id, size) => resumables.complete(id, size),
    reopenResumable: (id, key) => resumables.reopen(id, key),
    removeResumable: (id) => resumables.remove(id),
    recorded: (id, offset) => resumables.recorded(id, offset),
    open: (key, opts) => openReader(ctx, key, opts?.size),
    read: (key, range) => readRange(ctx, ctx.fileKey(key), `object ${key}`, range),
    async delete(key) {
      await client.send(new DeleteObjectCommand({ Bucket: ctx.bucket, Key: ctx.fileKey(key) }));
      await dropOwnedCache(ctx, key);
    },
    withLocalFile: (key, fn) => withLocalFile(ctx, path.join(o.tmpDir), key, fn),
    listLeftovers: (idleMs) => listLeftovers(ctx, idleMs),
    async removeLeftover(l) {
      if (l.kind === 'temp') await abortTemp(ctx, l.id);
      else await resumables.remove(l.id);
    },
    listKeys: (olderThanMs) => listKeys(ctx, olderThanMs),
    async removeOwnTemps() {
      const own = [...ctx.ownUploads];
      for (const [objectKey, uploadId] of own) await abortUpload(ctx, objectKey, uploadId);
      return own.length;
    },
    cache,
    fastPath: () => false,
    async close() {
      if (!o.client) client.destroy();
    },
  };
}
