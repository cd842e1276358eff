import type { Ctx } from '../http/context.ts';
import { sendJson } from '../http/reply.ts';
import { jsonObject, readSmallBody } from '../http/body-in.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import type { Route } from '../http/server.ts';
import { ingestMultipart, type IngestResult } from '../ingest/multipart.ts';
import { AppError } from '../errors.ts';
import { closeRequest, insertRequest, listRequests, type OpenRequest } from '../db/requests.ts';
import { hashSecret, newUploadToken } from '../util/tokens.ts';
import { PLANS } from '../plans.ts';
import { randomBytesPooled } from '../util/random.ts';
import { DAY_MS, isoUtc } from '../util/time.ts';
import { sendHtml } from '../web/html.ts';
import { loadAssets } from '../web/assets.ts';
import { notFoundPage, requestView } from '../web/views.ts';
import { requestPage } from '../web/request-page.ts';
import { uploadOptionsFrom } from '../web/upload-options.ts';
import { appendViaRequest, checkRequestFiles, REQUEST_TOKEN_RE, resolveRequestToken } from '../bundles/requests.ts';
import { discard, failUpload, publishAll } from './upload.ts';
import type { Deps } from '../deps.ts';
const DEFAULT_MAX_FILES = 100;
const DEFAULT_EXPIRY_DAYS = 7;
/** How long a request of a plan whose bundles never expire may stay open. */
const LONGEST_REQUEST_DAYS = 365;

/**
 * Upload requests ("reverse shares"): a key holder asks someone without an account for files.
 *   POST|GET /api/v1/my/requests, DELETE /api/v1/my/requests/<token>   (the key's requests)
 *   POST /api/v1/requests/<token>/upload                             (multipart files[], anyone with the link)
 *   GET /r/<token>                                                   (the drop page)
 * Uploads land in one bundle owned by the key, locked to everyone but the key; the uploader is told
 * only what it sent, never the bundle's link, token or other files.
 */
export function requestRoutes(deps: Deps): Route[] {
  const assets = loadAssets();
  const page = (ctx: Ctx): Promise<void> => dropPage(ctx, deps, assets);
  return [
    { method: 'post', pattern: '/api/v1/my/requests', handler: (ctx) => createRequest(ctx, deps) },
    { method: 'get', pattern: '/api/v1/my/requests', handler: (ctx) => listMine(ctx, deps) },
    { method: 'del', pattern: '/api/v1/my/requests/:token', handler: (ctx) => closeMine(ctx, deps) },
    { method: 'post', pattern: '/api/v1/requests/:token/upload', transfer: 'upload', handler: (ctx) => uploadInto(ctx, deps) },
    { method: 'get', pattern: '/r/:token', content: true, handler: page },
  ];
}

/** A whole number from `min` to `max`, `fallback` when absent; else 400 naming the field. */
function intField(v: unknown, name: string, min: number, max: number, fallback: number): number {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw new AppError('INVALID_REQUEST_FIELD', `${name} must be a whole number from ${min} to ${max}`);
  }
  return v;
}

async function createRequest(ctx: Ctx, deps: Deps): Promise<void> {
  const body = readSmallBody(ctx, 8 * 1024);
  body.catch(() => {}); // awaited below; if the key is refused first, its rejection is moot
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const plan = PLANS[key.plan];
  const o = await jsonObject(body);
  const label = o.label ?? null;
  if (label !== null && (typeof label !== 'string' || label.length > 200 || label.includes('\0'))) {
    throw new AppError('INVALID_REQUEST_FIELD', 'label must be text of at most 200 characters');
  }
  const maxBytes = intField(o.max_bytes, 'max_bytes', 1, plan.maxBundleBytes, plan.maxBundleBytes);
  const maxFiles = intField(o.max_files, 'max_files', 1, 10_000, DEFAULT_MAX_FILES);
  const longest = plan.expiryDays ?? LONGEST_REQUEST_DAYS;
  const days = intField(o.expires_in_days, 'expires_in_days', 1, longest, Math.min(DEFAULT_EXPIRY_DAYS, longest));
  const token = randomBytesPooled(32).toString('base64url');
  const expiresAt = new Date(Date.now() + days * DAY_MS);
  const row = await insertRequest(deps.sql, {
    tokenHash: hashSecret(token),
    prefix: token.slice(0, 8),
    apiKeyId: key.id,
    label: label as string | null,
    maxBytes,
    maxFiles,
    expiresAt,
    // The files are kept for the plan's time after the request ends.
    bundleExpiresAt: plan.expiryDays === null ? null : new Date(expiresAt.getTime() + plan.expiryDays * DAY_MS),
    lockHash: await deps.passwords.hash(newUploadToken()),
    uploadTokenHash: hashSecret(newUploadToken()),
  });
  sendJson(ctx, 201, {
    success: true,
    request_token: token,
    request_url: `/r/${token}`,
    label: row.label ?? '',
    max_bytes: row.max_bytes,
    max_files: row.max_files,
    expires_at: isoUtc(row.expires_at),
  });
}

async function listMine(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const rows = await listRequests(deps.sql, key.id);
  const now = Date.now();
  sendJson(ctx, 200, {
    success: true,
    requests: rows.map((r) => ({
      token_prefix: r.prefix,
      label: r.label ?? '',
      max_bytes: r.max_bytes,
      max_files: r.max_files,
      created_at: isoUtc(r.created_at),
      expires_at: isoUtc(r.expires_at),
      is_open: r.closed_at === null && r.expires_at.getTime() > now,
      closed_at: r.closed_at ? isoUtc(r.closed_at) : null,
      // The bundle the files land in: listed with its files in /api/v1/my/bundles.
      short_code: r.short_code,
      file_count: r.file_count,
      total_size_bytes: r.total_size_bytes,
    })),
  });
}

async function closeMine(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const token = ctx.params[0] ?? '';
  if (!REQUEST_TOKEN_RE.test(token) || !(await closeRequest(deps.sql, key.id, hashSecret(token)))) throw new AppError('REQUEST_NOT_FOUND');
  sendJson(ctx, 200, { success: true, closed: true });
}

async function uploadInto(ctx: Ctx, deps: Deps): Promise<void> {
  const token = ctx.params[0] ?? '';
  const ingest = ingestMultipart(ctx, deps.blobs, { fast: deps.fastPaths, metrics: deps.metrics });
  let req: OpenRequest;
  try {
    refuseOtherSite(ctx, deps.origin(ctx));
    req = await resolveRequestToken(deps, token);
  } catch (err) {
    ingest.cancel();
    return failUpload(ctx, deps, err);
  }
  // Refused as soon as the body passes the room left; the row lock at commit decides races.
  const room = req.max_bytes - req.total_size_bytes;
  let used = 0;
  let result: IngestResult;
  try {
    result = await ingest.start((n) => (used += n) <= room, room);
  } catch (err) {
    return failUpload(ctx, deps, err);
  }
  try {
    if (result.files.length === 0) throw new AppError('NO_FILES');
    checkRequestFiles(req, result.files.length);
    const newFiles = await publishAll(result.files);
    if (ctx.aborted) throw new AppError('MALFORMED_MULTIPART', 'client went away');
    const { rows } = await appendViaRequest(deps, req, newFiles);
    // Only what the uploader sent: no ids, links or anything else of the bundle.
    sendJson(ctx, 200, { success: true, files: rows.map((f) => ({ name: f.name, size: f.size })) });
  } catch (err) {
    await discard(result.files);
    return failUpload(ctx, deps, err);
  }
}

async function dropPage(ctx: Ctx, deps: Deps, assets: ReturnType<typeof loadAssets>): Promise<void> {
  const view = requestView(assets, deps.origin(ctx));
  const token = ctx.params[0] ?? '';
  const req = await resolveRequestToken(deps, token).catch((err: unknown) => {
    if (err instanceof AppError && err.code === 'REQUEST_NOT_FOUND') return undefined;
    throw err;
  });
  if (!req) return sendHtml(ctx, 404, notFoundPage(view));
  // The page carries the token in its form: never stored by caches.
  sendHtml(ctx, 200, requestPage(view, req, token, uploadOptionsFrom(ctx.query)), 'no-store');
}
