import type { Ctx } from '../http/context.ts';
import { sendError, sendJson } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { cannotFitRoom, ingestMultipart, type IngestedFile, type IngestResult } from '../ingest/multipart.ts';
import { AppError, toAppError } from '../errors.ts';
import type { NewFile } from '../db/bundles.ts';
import { appendParts, checkFileCount, createFromParts, removeBundle, resolveUploadToken, validateFields } from '../bundles/service.ts';
import { isoUtc } from '../util/time.ts';
import { eachLimited } from '../util/limit.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import type { Deps } from '../deps.ts';
import type { Caller } from '../auth/caller.ts';
import type { FileRow } from '../db/rows.ts';
import { sharingJson } from '../bundles/fields.ts';
import { beyondEveryPlanText, MOST_ANY_BUNDLE_HOLDS, overCapText, overRoomText } from '../bundles/cap.ts';

/** A file as the interface lists it. */
export const fileJson = (f: FileRow): Record<string, unknown> => ({
  id: f.id,
  name: f.name,
  size: f.size,
  mime_type: f.mime_type,
  download_url: `/api/v1/download/${f.id}`,
});

export function uploadRoutes(deps: Deps): Route[] {
  /**
   * This process's appends per bundle, so parallel appends share the cap while they stream: the bytes
   * streaming now, and those committed since (the room each read at its start no longer shows them
   * as free). Across processes only the row lock in appendFiles holds the cap, at commit.
   */
  const inflightByBundle = new Map<number, AppendState>();
  return [
    { method: 'post', pattern: '/api/v1/upload', transfer: 'upload', refuseEarly: (ctx) => cannotFit(ctx, deps, true), handler: (ctx) => createBundle(ctx, deps) },
    { method: 'post', pattern: '/api/v1/upload/:token', transfer: 'upload', refuseEarly: (ctx) => cannotFit(ctx, deps, false), handler: (ctx) => appendToBundle(ctx, deps, inflightByBundle) },
  ];
}

/**
 * A Content-Length that no form within the parser's limits can bring under the cap: the anonymous
 * cap for a new bundle sent without a key, else the largest a plan allows (the caller's own plan, or
 * the bundle's room, is checked once known, still before the body is read).
 */
function cannotFit(ctx: Ctx, deps: Deps, newBundle: boolean): AppError | null {
  const anonymous = newBundle && !/^bearer\s/i.test(ctx.headers.authorization ?? '');
  const cap = anonymous ? deps.config.anonMaxBundleBytes : Math.max(MOST_ANY_BUNDLE_HOLDS, deps.config.anonMaxBundleBytes);
  if (!cannotFitRoom(ctx, cap)) return null;
  deps.metrics?.capRejected();
  return new AppError('SIZE_EXCEEDED', anonymous ? overCapText(cap, null) : beyondEveryPlanText());
}

interface AppendState {
  streaming: number;
  /** Bytes of this process's appends committed while any append to the bundle was streaming. */
  committed: number;
  requests: number;
}

async function createBundle(ctx: Ctx, deps: Deps): Promise<void> {
  const ingest = ingestMultipart(ctx, deps.blobs, { fast: deps.fastPaths, metrics: deps.metrics });
  let result: IngestResult;
  let uploader;
  let caller: Caller;
  try {
    caller = await deps.access.callerOf(ctx);
    uploader = deps.access.uploaderFor(caller);
    refuseOtherSite(ctx, deps.origin(ctx));
  } catch (err) {
    ingest.cancel();
    return failUpload(ctx, deps, err);
  }
  let used = 0;
  const cap = uploader.maxBundleBytes;
  const overCap = (): string => overCapText(cap, caller.apiKey?.plan ?? null);
  try {
    result = await ingest.start((n) => (used += n) <= cap, cap);
  } catch (err) {
    return failUpload(ctx, deps, sized(err, overCap));
  }
  try {
    const fields = await validateFields(deps, result.fields, uploader, caller);
    checkFileCount(result.files.length);
    const newFiles = await publishAll(result.files);
    // Nobody would ever learn this bundle's token: keep nothing.
    if (ctx.aborted) throw new AppError('MALFORMED_MULTIPART', 'client went away');
    const { bundle, files, uploadToken: token } = await createFromParts(deps, fields, uploader.apiKeyId, newFiles);
    if (ctx.aborted) {
      // Gone while the rows were written: the token was never delivered. Undo (the catch removes the files).
      await removeBundle(deps, bundle.id);
      throw new AppError('MALFORMED_MULTIPART', 'client went away');
    }
    sendJson(ctx, 201, {
      success: true,
      short_code: bundle.short_code,
      share_url: `/${bundle.short_code}`,
      upload_url: `/u/${token}`,
      upload_token: token,
      expires_at: bundle.expires_at ? isoUtc(bundle.expires_at) : null,
      files: files.map(fileJson),
      ...sharingJson(bundle),
    });
  } catch (err) {
    await discard(result.files);
    return failUpload(ctx, deps, sized(err, overCap));
  }
}

async function appendToBundle(ctx: Ctx, deps: Deps, inflightByBundle: Map<number, AppendState>): Promise<void> {
  const token = ctx.params[0] ?? '';
  const ingest = ingestMultipart(ctx, deps.blobs, { fast: deps.fastPaths, metrics: deps.metrics });
  let bundle;
  try {
    // Any Bearer that is not an active key is refused on uploads, appends included (CONTRACT).
    deps.access.uploaderFor(await deps.access.callerOf(ctx));
    refuseOtherSite(ctx, deps.origin(ctx));
    bundle = await resolveUploadToken(deps, token);
  } catch (err) {
    ingest.cancel();
    return failUpload(ctx, deps, err);
  }
  const id = bundle.id;
  const state = inflightByBundle.get(id) ?? { streaming: 0, committed: 0, requests: 0 };
  inflightByBundle.set(id, state);
  state.requests++;
  // Taken before the room is read: a commit counted after this may already be in that room, so it
  // can count twice (a refusal a little early), never not at all.
  const committedBefore = state.committed;
  let mine = 0;
  const release = (stored: boolean): void => {
    state.streaming -= mine;
    if (stored) state.committed += mine;
    mine = 0;
    if (--state.requests === 0) inflightByBundle.delete(id);
  };
  let result: IngestResult;
  const overRoom = (): string => overRoomText(bundle.max_size_bytes, bundle.room);
  try {
    const room = bundle.room;
    result = await ingest.start((n) => {
      if (state.streaming + (state.committed - committedBefore) + n > room) return false;
      mine += n;
      state.streaming += n;
      return true;
    }, room);
  } catch (err) {
    release(false);
    return failUpload(ctx, deps, sized(err, overRoom));
  }
  let stored = false;
  try {
    if (result.files.length === 0) throw new AppError('NO_FILES');
    const newFiles = await publishAll(result.files);
    if (ctx.aborted) throw new AppError('MALFORMED_MULTIPART', 'client went away');
    const { rows } = await appendParts(deps, id, newFiles);
    stored = true;
    sendJson(ctx, 200, {
      success: true,
      short_code: bundle.short_code,
      share_url: `/${bundle.short_code}`,
      upload_url: `/u/${token}`,
      files: rows.map(fileJson),
    });
  } catch (err) {
    await discard(result.files);
    return failUpload(ctx, deps, sized(err, overRoom));
  } finally {
    release(stored);
  }
}

/** Objects published at once by one request. */
const PUBLISH_AT_ONCE = 8;

/** A refusal over the cap says the cap, in bytes and in words, and how to raise it. */
const sized = (err: unknown, text: () => string): unknown =>
  err instanceof AppError && err.code === 'SIZE_EXCEEDED' ? new AppError('SIZE_EXCEEDED', text()) : err;

/**
 * Publishes every finished (durable) object under its key, a few at once (on S3 each is a request:
 * one after another, a request of thousands of files outlasted the wait for its answer); the rows
 * are committed after.
 */
export async function publishAll(files: readonly IngestedFile[]): Promise<NewFile[]> {
  await eachLimited(files, PUBLISH_AT_ONCE, (f) => f.writer.publish());
  return files.map((f) => ({
    storageKey: f.writer.key, name: f.name, size: f.size, mimeType: f.mimeType, crc32: f.crc32, sha256: f.sha256 ?? f.writer.lateSha256?.() ?? null,
  }));
}

/** Nothing of a failed request stays: every object goes, published or not. */
export async function discard(files: readonly IngestedFile[]): Promise<void> {
  await Promise.all(files.map((f) => f.writer.abort().catch(() => {})));
}

/** Errors while the body may still be arriving close the connection so the client stops sending. */
export function failUpload(ctx: Ctx, deps: Deps, err: unknown): void {
  const e = toAppError(err);
  // No path in the log: an append's path is its upload token.
  if (e.status >= 500) deps.log.error({ err: e.cause ?? err, reqId: ctx.id }, 'upload failed');
  if (ctx.aborted) deps.metrics?.uploadAborted();
  else if (e.code === 'SIZE_EXCEEDED') deps.metrics?.capRejected();
  else if (e.code === 'DATABASE_ERROR') deps.metrics?.dbError();
  sendError(ctx, e, true);
}
