import type { Ctx } from '../http/context.ts';
import { sendJson } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { AppError } from '../errors.ts';
import { deleteBundle, findBundle } from '../db/bundles.ts';
import { deleteFile, findFileWithToken } from '../db/files.ts';
import { bundleRoom } from '../db/bundle-room.ts';
import { secretMatches, SHORT_CODE_RE, UPLOAD_TOKEN_RE } from '../util/tokens.ts';
import { sqlUtc } from '../util/time.ts';
import { parseFileId } from './download.ts';
import type { Deps } from '../deps.ts';
import { fileWithRemaining, limitJson } from '../bundles/limits.ts';
import { refuseQuarantined } from '../db/quarantine.ts';
import { mayChange } from '../bundles/guard.ts';
import { removeObjects } from '../storage/remove.ts';

export function bundleRoutes(deps: Deps): Route[] {
  return [
    { method: 'get', pattern: '/api/v1/bundle/:code', handler: (ctx) => bundleInfo(ctx, deps) },
    { method: 'get', pattern: '/api/v1/bundle/:code/status', handler: (ctx) => bundleStatus(ctx, deps) },
    { method: 'del', pattern: '/api/v1/bundle/:code', handler: (ctx) => removeBundle(ctx, deps) },
    { method: 'del', pattern: '/api/v1/file/:id', handler: (ctx) => removeFile(ctx, deps) },
  ];
}

function shortCode(ctx: Ctx): string {
  const code = ctx.params[0] ?? '';
  if (!SHORT_CODE_RE.test(code)) throw new AppError('INVALID_SHORT_CODE');
  return code;
}

async function bundleInfo(ctx: Ctx, deps: Deps): Promise<void> {
  const bundle = await deps.bundles.get(shortCode(ctx));
  if (!bundle) throw new AppError('BUNDLE_NOT_FOUND');
  // A locked bundle lists no files: the owner's key or an access token unlocks it.
  const caller = await deps.access.callerOf(ctx);
  const files = deps.access.canRead(ctx, caller, bundle) ? bundle.files : [];
  sendJson(ctx, 200, {
    success: true,
    short_code: bundle.short_code,
    file_count: bundle.file_count,
    total_size_bytes: bundle.total_size_bytes,
    max_size_bytes: bundle.max_size_bytes,
    expires_at: bundle.expires_at ? sqlUtc(bundle.expires_at) : null,
    is_expired: false,
    is_encrypted: bundle.is_encrypted,
    created_at: sqlUtc(bundle.created_at),
    ...limitJson(bundle.max_downloads),
    files: files.map((f) => ({ ...fileWithRemaining(f, bundle.max_downloads), download_url: `/api/v1/download/${f.id}` })),
  });
}

async function bundleStatus(ctx: Ctx, deps: Deps): Promise<void> {
  const code = shortCode(ctx);
  // An active bundle is in the info cache, with what unfinished tus uploads reserved (room that is
  // not free: an append of it would be refused); only an expired or unknown code needs findBundle.
  const info = await deps.bundles.get(code);
  const bundle = info ?? (await findBundle(deps.sql, code));
  if (!bundle) throw new AppError('BUNDLE_NOT_FOUND');
  const room = info
    ? info.max_size_bytes - info.total_size_bytes - info.tus_reserved
    : bundle.is_expired
      ? 0
      : (await bundleRoom(deps.sql, bundle.id)).room;
  sendJson(ctx, 200, {
    success: true,
    exists: true,
    is_expired: bundle.is_expired,
    expires_at: bundle.expires_at ? sqlUtc(bundle.expires_at) : null,
    total_size_bytes: bundle.total_size_bytes,
    max_size_bytes: bundle.max_size_bytes,
    space_remaining: Math.max(0, room),
  });
}

async function removeBundle(ctx: Ctx, deps: Deps): Promise<void> {
  const code = shortCode(ctx);
  const token = ctx.headers['x-upload-token']?.trim();
  if (!token) throw new AppError('UPLOAD_TOKEN_REQUIRED');
  const bundle = await findBundle(deps.sql, code);
  if (!bundle) throw new AppError('BUNDLE_NOT_FOUND');
  if (!UPLOAD_TOKEN_RE.test(token) || !secretMatches(token, bundle.upload_token_hash)) {
    throw new AppError('INVALID_UPLOAD_TOKEN');
  }
  const keys = await deleteBundle(deps.sql, bundle.id, mayChange('delete', 'holder'));
  deps.bundles.invalidate(bundle.id);
  // The rows are committed: the bundle is gone. Its files go after the answer, which must not wait on
  // a slow store (thousands of objects on S3 outlast the answer's deadline); what a crash leaves
  // behind, the sweeper's orphan pass reclaims.
  sendJson(ctx, 200, { success: true });
  await removeObjects(deps.blobs, keys, deps.log);
}

/** Compared against when there is no row, so a missing file costs the same work as a wrong token. */
const NO_BUNDLE = new Uint8Array(32);

async function removeFile(ctx: Ctx, deps: Deps): Promise<void> {
  const id = parseFileId(ctx.params[0]);
  if (id === null) throw new AppError('INVALID_FILE_ID');
  // A Bearer value is the upload token only when it looks like one; an API key sent beside
  // ?upload_token= must not shadow it.
  const bearer = /^bearer\s+(\S+)\s*$/i.exec(ctx.headers.authorization ?? '')?.[1];
  const token = (bearer !== undefined && UPLOAD_TOKEN_RE.test(bearer) ? bearer : null) ?? ctx.query.get('upload_token') ?? bearer ?? '';
  if (token === '') throw new AppError('UPLOAD_TOKEN_REQUIRED');
  const row = await findFileWithToken(deps.sql, id);
  // No such file and another bundle's file (locked or expired ones included) get one answer: any
  // difference would tell which ids exist (older ids are sequential). It is the spec's 403 "access
  // denied", since the spec gives this endpoint no 404; the token is compared either way.
  const denied = (): AppError => new AppError('INVALID_UPLOAD_TOKEN', 'Access denied: invalid upload token');
  const matches = secretMatches(token, row?.upload_token_hash ?? NO_BUNDLE);
  if (!row || !matches || !UPLOAD_TOKEN_RE.test(token)) throw denied();
  refuseQuarantined(row);
  if (row.is_expired) throw new AppError('BUNDLE_EXPIRED');
  const key = await removeOneFile(deps, id, row.bundle_id);
  // Deleted meanwhile: no such file, as above.
  if (key === undefined) throw denied();
  // As for a bundle: the row is committed, and the bytes go after the answer.
  sendJson(ctx, 200, { success: true, deleted_file_id: id });
  await removeObjects(deps.blobs, [key], deps.log);
}

/**
 * Deletes one file of bundle `bundleId` for a holder of the bundle's secret (its upload token, or
 * the file's tus upload URL), if the bundle guard allows: the row and the bundle's totals. Gives
 * the key of its bytes, for the caller to remove once it has answered, or undefined when the file
 * was already gone.
 */
export async function removeOneFile(deps: Deps, fileId: number, bundleId: number): Promise<string | undefined> {
  const key = await deleteFile(deps.sql, fileId, bundleId, mayChange('remove-file', 'holder'));
  deps.bundles.invalidate(bundleId);
  return key;
}
