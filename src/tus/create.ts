import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';
import type { Deps } from '../deps.ts';
import type { Caller, Uploader } from '../auth/caller.ts';
import { resolveUploadToken, validateFields } from '../bundles/service.ts';
import { randomHex } from '../util/random.ts';
import { cleanFileName, cleanMimeType } from '../util/names.ts';
import { checkRequestFiles, resolveRequestToken } from '../bundles/requests.ts';
import { AppError } from '../errors.ts';
import { finishedHeaders } from './complete.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import { mayChange } from '../bundles/guard.ts';
import { tapBody, type BodyTap } from './patch.ts';
import { appendBody, hasBody } from './body.ts';
import { deleteUpload, findUpload, insertUpload, reserveInBundle, setProgress, type NewUpload } from '../db/tus-uploads.ts';
import { spendPartials, holdPartials, parseConcat, type Concat, type HeldPartials } from './concat.ts';
import { overCapText } from '../bundles/cap.ts';
import {
  NO_STORE, checkResumable, httpDate, intHeader, OFFSET_TYPE, parseChecksum, parseMetadata, replyError, storableMetadata,
  UPLOAD_TTL_MS, type Checksum,
} from './protocol.ts';

type Headers = Readonly<Record<string, string>>;

/**
 * POST /api/v1/tus/: creation (+ creation-with-upload, creation-defer-length, concatenation). It
 * spends one request of the caller's hourly budget (an upload's later requests are bounded per
 * upload); the declared length is checked against the plan's cap (or reserved in the bundle named
 * by upload_token) before any byte is accepted. A final upload is joined from its partials here.
 */
export async function createUpload(ctx: Ctx, deps: Deps): Promise<void> {
  const h = ctx.headers;
  const withBody = hasBody(h);
  const tap = withBody ? tapBody(ctx) : null;
  const fail = (err: unknown): void => {
    tap?.cancel();
    replyError(ctx, err, (e) => deps.log.error({ err: e, reqId: ctx.id, route: 'POST /api/v1/tus/' }, 'tus creation failed'), withBody);
  };
  let uploader: Uploader;
  let caller: Caller;
  try {
    // Admitted by the server first: a refused creation (412) counts and carries the X-RateLimit headers too.
    caller = await deps.access.callerOf(ctx);
    refuseOtherSite(ctx, deps.origin(ctx));
    checkResumable(h);
    uploader = deps.access.uploaderFor(caller);
  } catch (err) {
    return fail(err);
  }
  let created = false;
  let id = '';
  let partials: HeldPartials | null = null;
  try {
    const concat = parseConcat(h['upload-concat']);
    let length = declaredLength(h, concat, withBody);
    if (concat?.kind === 'final') {
      const held = await holdPartials(deps, concat.ids);
      // The same final request again (its client lost the answer): the first answer again.
      if (held.joinedInto !== null) return await answerAgain(ctx, deps, held.joinedInto);
      partials = held;
      length = partials.length;
    }
    const checksum = withBody ? checkBody(h, length ?? uploader.maxBundleBytes) : null;
    const meta = parseMetadata(h['upload-metadata']);
    // Public (the upload's URL): all 128 bits random, unlike a storage key's shard prefix.
    id = randomHex(16);
    const base = newUpload(id, h, meta, uploader, length, concat);
    // The object exists before its row: a row never names a missing object (the sweeper reclaims
    // one left without a row).
    await deps.blobs.createResumable(id);
    created = true;
    await insertRow(deps, base, meta, concat, uploader, caller);
    if (partials) {
      await deps.blobs.join(id, partials.rows.map((r) => ({ id: r.id, length: r.upload_length ?? 0 })));
      await setProgress(deps.sql, id, partials.length, partials.length);
    }
    await answer(ctx, deps, base, { tap, checksum, partials, withBody });
  } catch (err) {
    if (created) await discard(deps, id);
    await partials?.release();
    return fail(err);
  }
}

/** Upload-Length as declared (undefined when deferred, and for a final upload, whose length is known once its partials are held). */
function declaredLength(h: Headers, concat: Concat | null, withBody: boolean): number | undefined {
  const length = intHeader(h, 'upload-length');
  const deferred = h['upload-defer-length'];
  if (concat?.kind === 'final') {
    // Its length is the sum of its partials'; its bytes are theirs.
    if (length !== undefined || deferred !== undefined || withBody) {
      throw new AppError('INVALID_CONCAT', 'A final upload carries neither Upload-Length nor a body');
    }
  } else if ((length === undefined) === (deferred === undefined) || (deferred !== undefined && deferred !== '1')) {
    throw new AppError('INVALID_LENGTH', 'Send either Upload-Length or Upload-Defer-Length: 1');
  }
  if (concat?.kind === 'partial' && length === undefined) throw new AppError('INVALID_LENGTH', 'A partial upload needs Upload-Length');
  return length;
}

/** Checks the headers of a creation that carries bytes, which may not pass `most`; returns its checksum, if any. */
function checkBody(h: Headers, most: number): Checksum | null {
  if ((h['content-type'] ?? '').split(';')[0]!.trim().toLowerCase() !== OFFSET_TYPE) {
    throw new AppError('WRONG_CONTENT_TYPE', `Content-Type must be ${OFFSET_TYPE}`);
  }
  const checksum = parseChecksum(h['upload-checksum']);
  const bodyLength = intHeader(h, 'content-length');
  if (bodyLength !== undefined && bodyLength > most) {
    throw new AppError('UPLOAD_TOO_LARGE', 'Body goes past Upload-Length or the size limit');
  }
  return checksum;
}

/** The row's fields as declared; insertRow settles which bundle it joins. */
function newUpload(
  id: string,
  h: Headers,
  meta: Record<string, string>,
  uploader: Uploader,
  length: number | undefined,
  concat: Concat | null,
): NewUpload {
  const name = cleanFileName(meta.filename ?? meta.name);
  return {
    id,
    bundle_id: null,
    new_bundle: null,
    api_key_id: uploader.apiKeyId,
    upload_length: length ?? null,
    max_bytes: uploader.maxBundleBytes,
    file_name: name,
    mime_type: cleanMimeType(meta.filetype ?? meta.type, name),
    metadata: storableMetadata(h['upload-metadata']),
    concat: concat === null ? null : concat.kind === 'partial' ? 'partial' : concat.raw,
    expires_at: new Date(Date.now() + UPLOAD_TTL_MS),
  };
}

/** Writes the upload's row, with its bundle: none yet, a new one, or room reserved in an existing one. */
async function insertRow(
  deps: Deps,
  base: NewUpload,
  meta: Record<string, string>,
  concat: Concat | null,
  uploader: Uploader,
  caller: Caller,
): Promise<void> {
  if (concat?.kind === 'partial') {
    // A piece of a file: no bundle until a final upload joins it (which reserves or checks the room).
    if (base.upload_length! > uploader.maxBundleBytes) throw new AppError('UPLOAD_TOO_LARGE', overCapText(uploader.maxBundleBytes, caller.apiKey?.plan ?? null));
    await insertUpload(deps.sql, base);
  } else if (meta.request_token !== undefined) {
    // An upload request's link: an append to its bundle, within the request's room and files.
    const req = await resolveRequestToken(deps, meta.request_token);
    checkRequestFiles(req, 1);
    await reserveInBundle(deps.sql, req.bundle_id, base.upload_length, { ...base, bundle_id: req.bundle_id }, mayChange('add', 'holder'));
    deps.bundles.invalidate(req.bundle_id);
  } else if (meta.upload_token !== undefined) {
    const bundle = await resolveUploadToken(deps, meta.upload_token);
    await reserveInBundle(deps.sql, bundle.id, base.upload_length, { ...base, bundle_id: bundle.id }, mayChange('add', 'holder'));
    deps.bundles.invalidate(bundle.id); // its room shrank (other processes hear it from the change feed)
  } else {
    if (base.upload_length !== null && base.upload_length > uploader.maxBundleBytes) {
      throw new AppError('UPLOAD_TOO_LARGE', overCapText(uploader.maxBundleBytes, caller.apiKey?.plan ?? null));
    }
    const newBundle = await validateFields(deps, meta, uploader, caller);
    await insertUpload(deps.sql, { ...base, new_bundle: newBundle });
  }
}

/** Takes the creation's bytes, if any (a final upload's are its partials'), and answers 201. */
async function answer(
  ctx: Ctx,
  deps: Deps,
  base: NewUpload,
  o: { tap: BodyTap | null; checksum: Checksum | null; partials: HeldPartials | null; withBody: boolean },
): Promise<void> {
  const { id } = base;
  const { partials } = o;
  const row = await findUpload(deps.sql, id);
  if (!row) throw new AppError('INTERNAL', 'tus upload row vanished');
  const location = `${deps.origin(ctx)}/api/v1/tus/${id}`;
  const complete = o.withBody || base.upload_length === 0 || partials !== null;
  const headers = complete ? await appendBody(ctx, deps, o.tap, row, o.checksum, null) : [];
  // Joined into a file: the partials are spent.
  const joined = partials !== null && row.upload_offset === row.upload_length;
  if (joined) await spendPartials(deps, partials!.rows, id);
  // Released before the answer goes out, so the client's next request never meets these locks.
  await partials?.release();
  // A client gone before the answer never learns this upload's URL, unless it joined partials: the
  // same final request repeated finds it through them (answerAgain), so it stays.
  if (ctx.aborted && !joined) return await discard(deps, id);
  const all: Array<readonly [string, string]> = [...NO_STORE, ['Location', location], ...headers];
  if (headers.length === 0) all.push(['Upload-Offset', '0'], ['Upload-Expires', httpDate(base.expires_at)]);
  send(ctx, 201, '', all);
}

/** A final upload's 201 again, for the same request repeated: its URL and what its completion told. */
async function answerAgain(ctx: Ctx, deps: Deps, finalId: string): Promise<void> {
  const row = await findUpload(deps.sql, finalId);
  if (!row) throw new AppError('INVALID_CONCAT', 'A partial upload named in Upload-Concat was already joined into a final upload');
  send(ctx, 201, '', [
    ...NO_STORE,
    ['Location', `${deps.origin(ctx)}/api/v1/tus/${finalId}`],
    ['Upload-Offset', String(row.upload_offset)],
    ['Upload-Expires', httpDate(row.expires_at)],
    ...(await finishedHeaders(deps, row)),
  ]);
}

/**
 * A client learns an upload's URL only from the 201: a creation answered with an error (460 or 413
 * on the first bytes, a failed write), or cut off by the client, leaves neither row nor part. Kept,
 * they were out of everyone's reach for 24 hours, and an append's row held its room in the bundle
 * all that time. The part goes only once the row is gone: a row never names a missing part (if the
 * database cannot be reached, the sweeper reclaims both at expiry).
 */
async function discard(deps: Deps, id: string): Promise<void> {
  const gone = await deleteUpload(deps.sql, id).then(() => true, () => false);
  if (gone) await deps.blobs.removeResumable(id);
}
