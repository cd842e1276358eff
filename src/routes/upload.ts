import { rm } from 'node:fs/promises';
import type { Ctx } from '../http/context.ts';
import { sendJson, send } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { ingestMultipart, type IngestedFile, type IngestResult } from '../ingest/multipart.ts';
import { AppError, toAppError } from '../errors.ts';
import { appendFiles, deleteBundle, findBundleByTokenHash, MAX_FILES_PER_BUNDLE, type FileRow, type NewFile } from '../db/bundles.ts';
import { bundleRoom } from '../db/bundle-room.ts';
import { hashSecret, newUploadToken, secretMatches, UPLOAD_TOKEN_RE } from '../auth/tokens.ts';
import { newFileKey } from '../storage/disk.ts';
import { isoUtc, DAY_MS } from '../util/time.ts';
import { isEmail, descriptionProblem, cleanDescription } from '../util/names.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import { fileJson, type Deps } from './deps.ts';

export function uploadRoutes(given: Deps): Route[] {
  // Abuse checks (abuse/inspector.ts): every part ingested through this disk is scanned and hashed.
  const deps: Deps = given.inspector ? { ...given, disk: given.inspector.disk(given.disk) } : given;
  /**
   * This process's appends per bundle, so parallel appends share the cap while they stream: the bytes
   * streaming now, and those committed since (the room each read at its start no longer shows them
   * as free). Across processes only the row lock in appendFiles holds the cap, at commit.
   */
  const inflightByBundle = new Map<number, AppendState>();
  return [
    // Body routes admit the caller themselves, after registering the body reader.
    { method: 'post', pattern: '/api/v1/upload', streamsBody: true, transfer: 'upload', handler: (ctx) => createBundle(ctx, deps) },
    { method: 'post', pattern: '/api/v1/upload/:token', streamsBody: true, transfer: 'upload', handler: (ctx) => appendToBundle(ctx, deps, inflightByBundle) },
  ];
}

interface AppendState {
  streaming: number;
  /** Bytes of this process's appends committed while any append to the bundle was streaming. */
  committed: number;
  requests: number;
}

async function createBundle(ctx: Ctx, deps: Deps): Promise<void> {
  const ingest = ingestMultipart(ctx, deps.disk);
  let result: IngestResult;
  let uploader;
  try {
    uploader = deps.access.uploaderFor(await deps.access.admit(ctx));
    refuseOtherSite(ctx, deps.origin(ctx));
  } catch (err) {
    ingest.cancel();
    return failUpload(ctx, deps, err);
  }
  let used = 0;
  const cap = uploader.maxBundleBytes;
  try {
    result = await ingest.start((n) => (used += n) <= cap);
  } catch (err) {
    return failUpload(ctx, deps, err);
  }
  const committed: string[] = [];
  try {
    const f = result.fields;
    const description = cleanDescription(optional(f.description));
    const problem = descriptionProblem(description);
    if (problem) throw new AppError(problem);
    const notifyEmail = optional(f.notify_email);
    if (notifyEmail !== null && !isEmail(notifyEmail)) throw new AppError('INVALID_EMAIL');
    if (result.files.length === 0) throw new AppError('NO_FILES');
    const password = optional(f.access_password);
    const accessPasswordHash = password === null ? null : await deps.passwords.hash(password);
    if (result.files.length > MAX_FILES_PER_BUNDLE) throw new AppError('TOO_MANY_FILES');
    const newFiles = await commitParts(deps, result.files, committed);
    // Nobody would ever learn this bundle's token: keep nothing.
    if (ctx.aborted) throw new AppError('MALFORMED_MULTIPART', 'client went away');
    const token = newUploadToken();
    const now = Date.now();
    const { bundle, files } = await deps.newBundles.insert(
      {
        uploadTokenHash: hashSecret(token),
        description,
        accessPasswordHash,
        notifyEmail,
        isEncrypted: f.encrypted === '1' || f.encrypted === 'true',
        apiKeyId: uploader.apiKeyId,
        maxSizeBytes: cap,
        expiresAt: uploader.expiryDays === null ? null : new Date(now + uploader.expiryDays * DAY_MS),
      },
      newFiles,
    );
    if (ctx.aborted) {
      // Gone while the rows were written: the token was never delivered. Undo (the catch removes the files).
      await deleteBundle(deps.sql, bundle.id);
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
    });
  } catch (err) {
    await discard(deps, result.files, committed);
    return failUpload(ctx, deps, err);
  }
}

async function appendToBundle(ctx: Ctx, deps: Deps, inflightByBundle: Map<number, AppendState>): Promise<void> {
  const token = ctx.params[0] ?? '';
  const ingest = ingestMultipart(ctx, deps.disk);
  let bundle;
  try {
    // Any Bearer that is not an active key is refused on uploads, appends included (CONTRACT).
    deps.access.uploaderFor(await deps.access.admit(ctx));
    refuseOtherSite(ctx, deps.origin(ctx));
    if (!UPLOAD_TOKEN_RE.test(token)) throw new AppError('INVALID_UPLOAD_TOKEN');
    bundle = await findBundleByTokenHash(deps.sql, hashSecret(token));
    if (!bundle || !secretMatches(token, bundle.upload_token_hash)) throw new AppError('INVALID_UPLOAD_TOKEN');
    if (bundle.is_expired) throw new AppError('BUNDLE_EXPIRED');
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
  try {
    const { room } = await bundleRoom(deps.sql, id);
    result = await ingest.start((n) => {
      if (state.streaming + (state.committed - committedBefore) + n > room) return false;
      mine += n;
      state.streaming += n;
      return true;
    });
  } catch (err) {
    release(false);
    return failUpload(ctx, deps, err);
  }
  const committed: string[] = [];
  let stored = false;
  try {
    if (result.files.length === 0) throw new AppError('NO_FILES');
    const newFiles = await commitParts(deps, result.files, committed);
    if (ctx.aborted) throw new AppError('MALFORMED_MULTIPART', 'client went away');
    const rows: FileRow[] = await appendFiles(deps.sql, id, newFiles);
    stored = true;
    deps.bundles.invalidate(id);
    sendJson(ctx, 200, {
      success: true,
      short_code: bundle.short_code,
      share_url: `/${bundle.short_code}`,
      upload_url: `/u/${token}`,
      files: rows.map(fileJson),
    });
  } catch (err) {
    await discard(deps, result.files, committed);
    return failUpload(ctx, deps, err);
  } finally {
    release(stored);
  }
}

/** Renames every finished part to its final sharded path (each already fsynced). */
async function commitParts(deps: Deps, files: readonly IngestedFile[], committed: string[]): Promise<NewFile[]> {
  const out: NewFile[] = [];
  for (const f of files) {
    const key = newFileKey();
    committed.push(key); // before the rename: a failed directory fsync must still remove it
    await deps.disk.commit(f.partPath, key, f.finishedAt);
    out.push({ storageKey: key, name: f.name, size: f.size, mimeType: f.mimeType, crc32: f.crc32 });
  }
  return out;
}

/** Nothing of a failed request stays: remove its parts and any files already renamed. */
async function discard(deps: Deps, files: readonly IngestedFile[], committed: string[]): Promise<void> {
  await Promise.all([
    ...files.map((f) => rm(f.partPath, { force: true })),
    ...committed.map((k) => deps.disk.remove(k).catch(() => {})),
  ]);
}

/** Errors while the body may still be arriving close the connection so the client stops sending. */
function failUpload(ctx: Ctx, deps: Deps, err: unknown): void {
  const e = toAppError(err);
  // No path in the log: an append's path is its upload token.
  if (e.status >= 500) deps.log.error({ err: e.cause ?? err, reqId: ctx.id }, 'upload failed');
  if (ctx.aborted) deps.metrics?.uploadAborted();
  else if (e.code === 'SIZE_EXCEEDED') deps.metrics?.capRejected();
  else if (e.code === 'DATABASE_ERROR') deps.metrics?.dbError();
  if (ctx.done) return;
  send(
    ctx,
    e.status,
    JSON.stringify({ success: false, error: e.message, code: e.code }),
    [['Content-Type', 'application/json; charset=utf-8']],
    true,
  );
}

const optional = (v: string | undefined): string | null => (v === undefined || v === '' ? null : v);
