import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomHex } from '../util/random.ts';
import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import type { Deps } from '../routes/deps.ts';
import { PLANS } from '../auth/plans.ts';
import { tapBody, type BodyTap } from './patch.ts';
import { appendBody, hasBody } from './body.ts';
import { createUpload, partPathOf } from './create.ts';
import { bundleRoom } from '../db/bundles.ts';
import { isKeyActive } from '../auth/api-keys.ts';
import { AppError } from '../errors.ts';
import { deleteUpload, findUpload, lease, LEASE_MS, releaseLease, renewLease, type TusRow } from './store.ts';
import {
  BASE_HEADERS, CHECKSUM_ALGORITHMS, checkResumable, httpDate, intHeader, OFFSET_TYPE, parseChecksum, replyError, TUS_EXTENSIONS,
  TUS_VERSION, TusError, UPLOAD_ID_RE,
} from './protocol.ts';

/** Where unfinished uploads live: DATA_DIR/tus, beside files/ (same filesystem, so completion is a rename). */
export const tusDirOf = (filesDir: string): string => path.join(path.dirname(filesDir), 'tus');

/**
 * tus 1.0.0 at /api/v1/tus/. Every route reads the body itself or has none to read, so each admits
 * its caller itself: every request counts against the caller's budget and carries the X-RateLimit
 * headers (CONTRACT: every /api/* request counts). PATCH, HEAD and DELETE are authorized by the
 * unguessable upload id; a PATCH of an upload started under a key also needs that key still active.
 */
export function tusRoutes(deps: Deps): Route[] {
  const dir = tusDirOf(deps.disk.filesDir);
  const create = (ctx: Ctx): Promise<void> => createUpload(ctx, deps, dir);
  const options = async (ctx: Ctx): Promise<void> => {
    try {
      await deps.access.admit(ctx);
    } catch (err) {
      return replyError(ctx, err, logFailure(deps, ctx));
    }
    const maxSize = Math.max(deps.config.anonMaxBundleBytes, ...Object.values(PLANS).map((p) => p.maxBundleBytes));
    send(ctx, 204, '', [
      ...BASE_HEADERS,
      ['Tus-Version', TUS_VERSION],
      ['Tus-Extension', TUS_EXTENSIONS],
      ['Tus-Max-Size', String(maxSize)],
      ['Tus-Checksum-Algorithm', CHECKSUM_ALGORITHMS.join(',')],
    ]);
  };
  return [
    { method: 'options', pattern: '/api/v1/tus', streamsBody: true, handler: options },
    { method: 'options', pattern: '/api/v1/tus/', streamsBody: true, handler: options },
    { method: 'options', pattern: '/api/v1/tus/:id', streamsBody: true, handler: options },
    { method: 'post', pattern: '/api/v1/tus', streamsBody: true, handler: create },
    { method: 'post', pattern: '/api/v1/tus/', streamsBody: true, handler: create },
    { method: 'head', pattern: '/api/v1/tus/:id', streamsBody: true, handler: (ctx) => head(ctx, deps) },
    { method: 'patch', pattern: '/api/v1/tus/:id', streamsBody: true, transfer: 'upload', handler: (ctx) => patch(ctx, deps, dir) },
    { method: 'del', pattern: '/api/v1/tus/:id', streamsBody: true, handler: (ctx) => terminate(ctx, deps, dir) },
  ];
}

/** Logged with the route, never the path: an upload's id is all it takes to write to it or delete it. */
const logFailure = (deps: Deps, ctx: Ctx) => (err: unknown): void =>
  deps.log.error({ err, reqId: ctx.id, route: `${ctx.method.toUpperCase()} /api/v1/tus/:id` }, 'tus request failed');

function notFound(): TusError {
  return new TusError(404, 'UPLOAD_NOT_FOUND', 'Upload not found or expired');
}

async function head(ctx: Ctx, deps: Deps): Promise<void> {
  try {
    await deps.access.admit(ctx);
    checkResumable(ctx.headers);
    const id = ctx.params[0] ?? '';
    const row = UPLOAD_ID_RE.test(id) ? await findUpload(deps.sql, id) : undefined;
    if (!row || row.is_expired) throw notFound();
    const headers: Array<readonly [string, string]> = [
      ...BASE_HEADERS,
      ['Upload-Offset', String(row.upload_offset)],
      row.upload_length === null ? ['Upload-Defer-Length', '1'] : ['Upload-Length', String(row.upload_length)],
      ['Upload-Expires', httpDate(row.expires_at)],
    ];
    if (row.metadata !== '') headers.push(['Upload-Metadata', row.metadata]);
    send(ctx, 200, '', headers);
  } catch (err) {
    replyError(ctx, err, logFailure(deps, ctx));
  }
}

/**
 * Runs `work` holding the upload's lease (refreshed while it runs); the lease is released before
 * the answer goes out, so a client's next PATCH right after a 204 never meets its own lock.
 */
async function withLease<T>(deps: Deps, id: string, work: (row: TusRow) => Promise<T>): Promise<T> {
  if (!UPLOAD_ID_RE.test(id)) throw notFound();
  const owner = `${process.pid}-${randomHex(8)}`;
  const row = await lease(deps.sql, id, owner);
  if (!row) {
    if (await findUpload(deps.sql, id)) throw new TusError(423, 'UPLOAD_LOCKED', 'Another request is writing to this upload');
    throw notFound();
  }
  const timer = setInterval(() => {
    renewLease(deps.sql, id, owner).catch((err: unknown) => deps.log.warn({ err }, 'tus lease not renewed'));
  }, LEASE_MS / 3);
  timer.unref();
  try {
    return await work(row);
  } finally {
    clearInterval(timer);
    await releaseLease(deps.sql, id, owner).catch((err: unknown) => deps.log.warn({ err }, 'tus lease not released'));
  }
}

async function patch(ctx: Ctx, deps: Deps, dir: string): Promise<void> {
  const h = ctx.headers;
  const tap: BodyTap | null = hasBody(h) ? tapBody(ctx) : null;
  const id = ctx.params[0] ?? '';
  try {
    // A PATCH is an upload: a Bearer that is not an active key is refused (401), as on any upload.
    deps.access.uploaderFor(await deps.access.admit(ctx));
    checkResumable(h);
    if ((h['content-type'] ?? '').split(';')[0]!.trim().toLowerCase() !== OFFSET_TYPE) {
      throw new TusError(415, 'WRONG_CONTENT_TYPE', `Content-Type must be ${OFFSET_TYPE}`);
    }
    const offset = intHeader(h, 'upload-offset');
    if (offset === undefined) throw new TusError(400, 'INVALID_HEADER', 'Upload-Offset required');
    const checksum = parseChecksum(h['upload-checksum']);
    const declared = intHeader(h, 'upload-length');
    const contentLength = intHeader(h, 'content-length');
    const headers = await withLease(deps, id, async (row) => {
      if (row.is_expired) throw notFound();
      // Started under a key: the key must still be active for every byte and for completion (a
      // revoked key's upload would otherwise still become a bundle on its plan).
      if (row.api_key_id !== null && !(await isKeyActive(deps.sql, row.api_key_id))) throw new AppError('INVALID_API_KEY');
      if (offset !== row.upload_offset) {
        throw new TusError(409, 'OFFSET_MISMATCH', `Upload-Offset ${offset} does not match the upload's offset ${row.upload_offset}`);
      }
      if (row.completed_at !== null) {
        if (tap) throw new TusError(400, 'UPLOAD_COMPLETE', 'The upload is already complete');
        return [['Upload-Offset', String(row.upload_offset)], ['Upload-Expires', httpDate(row.expires_at)]] as const;
      }
      let maxBytes = row.max_bytes;
      if (row.bundle_id !== null) {
        // An append: refused once its bundle expired, like a multipart append. A deferred length
        // reserved only what arrived, so the room left now bounds it, not the room at creation.
        const target = await bundleRoom(deps.sql, row.bundle_id, row.id);
        if (target.expired) throw new TusError(403, 'BUNDLE_EXPIRED', 'Bundle has expired');
        if (row.upload_length === null) maxBytes = Math.min(maxBytes, target.room);
      }
      let length = row.upload_length;
      if (declared !== undefined) {
        if (length !== null && declared !== length) throw new TusError(400, 'INVALID_LENGTH', 'Upload-Length cannot change');
        if (declared < offset) throw new TusError(400, 'INVALID_LENGTH', 'Upload-Length is below the offset');
        if (declared > maxBytes) throw new TusError(413, 'SIZE_EXCEEDED', 'Upload-Length exceeds the size limit');
        length = declared;
      }
      if (contentLength !== undefined && offset + contentLength > (length ?? maxBytes)) {
        throw new TusError(413, 'SIZE_EXCEEDED', 'Body goes past Upload-Length or the size limit');
      }
      return appendBody(ctx, deps, tap, { ...row, upload_length: length, max_bytes: maxBytes }, partPathOf(dir, id), checksum);
    });
    send(ctx, 204, '', [...BASE_HEADERS, ...headers]);
  } catch (err) {
    tap?.cancel();
    replyError(ctx, err, logFailure(deps, ctx), tap !== null);
  }
}

async function terminate(ctx: Ctx, deps: Deps, dir: string): Promise<void> {
  const id = ctx.params[0] ?? '';
  try {
    await deps.access.admit(ctx);
    checkResumable(ctx.headers);
    await withLease(deps, id, async (row) => {
      // A completed upload's file belongs to its bundle now: only the session goes.
      await deleteUpload(deps.sql, row.id);
      if (row.completed_at === null) await fsp.rm(partPathOf(dir, id), { force: true });
    });
    send(ctx, 204, '', BASE_HEADERS);
  } catch (err) {
    replyError(ctx, err, logFailure(deps, ctx));
  }
}
