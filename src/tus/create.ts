import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';
import type { Caller, Deps, Uploader } from '../routes/deps.ts';
import { precheckSharing, sharingFields } from '../sharing/fields.ts';
import { openRequest } from '../routes/requests.ts';
import { findBundleByTokenHash } from '../db/bundles.ts';
import { hashSecret, secretMatches, UPLOAD_TOKEN_RE } from '../auth/tokens.ts';
import { newStorageKey } from '../storage/disk.ts';
import { cleanFileName, cleanMimeType, isEmail, descriptionProblem, cleanDescription } from '../util/names.ts';
import { AppError } from '../errors.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import { tapBody } from './patch.ts';
import { appendBody, hasBody } from './body.ts';
import { deleteUpload, findUpload, insertUpload, reserveInBundle, setProgress, type NewUpload } from './store.ts';
import { spendPartials, holdPartials, joinParts, parseConcat, type HeldPartials } from './concat.ts';
import {
  NO_STORE, checkResumable, httpDate, intHeader, OFFSET_TYPE, parseChecksum, parseMetadata, replyError, storableMetadata,
  TusError, UPLOAD_TTL_MS,
} from './protocol.ts';

/** The part of an upload: only the server-made id names it. */
export const partPathOf = (dir: string, id: string): string => path.join(dir, `${id}.part`);

/**
 * POST /api/v1/tus/: creation (+ creation-with-upload, creation-defer-length, concatenation). It
 * spends one request of the caller's hourly budget (an upload's later requests are bounded per
 * upload); the declared length is checked against the plan's cap (or reserved in the bundle named
 * by upload_token) before any byte is accepted. A final upload is joined from its partials here.
 */
export async function createUpload(ctx: Ctx, deps: Deps, dir: string): Promise<void> {
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
    // Admitted first: a refused creation (412) counts and carries the X-RateLimit headers too.
    caller = await deps.access.admit(ctx);
    refuseOtherSite(ctx, deps.origin(ctx));
    checkResumable(h);
    uploader = deps.access.uploaderFor(caller);
  } catch (err) {
    return fail(err);
  }
  let partPath: string | null = null;
  let id = '';
  let partials: HeldPartials | null = null;
  try {
    const concat = parseConcat(h['upload-concat']);
    let length = intHeader(h, 'upload-length');
    const deferred = h['upload-defer-length'];
    if (concat?.kind === 'final') {
      // Its length is the sum of its partials'; its bytes are theirs.
      if (length !== undefined || deferred !== undefined || withBody) {
        throw new TusError(400, 'INVALID_CONCAT', 'A final upload carries neither Upload-Length nor a body');
      }
      partials = await holdPartials(deps, concat.ids);
      length = partials.length;
    } else if ((length === undefined) === (deferred === undefined) || (deferred !== undefined && deferred !== '1')) {
      throw new TusError(400, 'INVALID_LENGTH', 'Send either Upload-Length or Upload-Defer-Length: 1');
    }
    if (concat?.kind === 'partial' && length === undefined) throw new TusError(400, 'INVALID_LENGTH', 'A partial upload needs Upload-Length');
    if (withBody && (h['content-type'] ?? '').split(';')[0]!.trim().toLowerCase() !== OFFSET_TYPE) {
      throw new TusError(415, 'WRONG_CONTENT_TYPE', `Content-Type must be ${OFFSET_TYPE}`);
    }
    const checksum = withBody ? parseChecksum(h['upload-checksum']) : null;
    const bodyLength = withBody ? intHeader(h, 'content-length') : undefined;
    if (bodyLength !== undefined && bodyLength > (length ?? uploader.maxBundleBytes)) {
      throw new TusError(413, 'SIZE_EXCEEDED', 'Body goes past Upload-Length or the size limit');
    }
    const meta = parseMetadata(h['upload-metadata']);
    const name = cleanFileName(meta.filename ?? meta.name);
    id = newStorageKey();
    const base: NewUpload = {
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
    await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
    partPath = partPathOf(dir, id);
    // The part exists before its row: a row never names a missing part (the sweeper reclaims a
    // part left without a row).
    await fsp.writeFile(partPath, '', { flag: 'wx', mode: 0o600 });
    if (concat?.kind === 'partial') {
      // A piece of a file: no bundle until a final upload joins it (which reserves or checks the room).
      if (length! > uploader.maxBundleBytes) throw new TusError(413, 'SIZE_EXCEEDED', 'Upload-Length exceeds the bundle size limit');
      await insertUpload(deps.sql, base);
    } else if (meta.request_token !== undefined) {
      // An upload request's link: an append to its bundle, within the request's room and files.
      const req = await openRequest(deps, meta.request_token);
      if (req.file_count >= req.max_files) throw new AppError('TOO_MANY_FILES', `This upload request takes at most ${req.max_files} files`);
      await reserveInBundle(deps.sql, req.bundle_id, base.upload_length, { ...base, bundle_id: req.bundle_id });
      deps.bundles.invalidate(req.bundle_id);
    } else if (meta.upload_token !== undefined) {
      const token = meta.upload_token;
      const bundle = UPLOAD_TOKEN_RE.test(token) ? await findBundleByTokenHash(deps.sql, hashSecret(token)) : undefined;
      if (!bundle || !secretMatches(token, bundle.upload_token_hash)) throw new AppError('INVALID_UPLOAD_TOKEN');
      if (bundle.is_expired) throw new AppError('BUNDLE_EXPIRED');
      await reserveInBundle(deps.sql, bundle.id, base.upload_length, { ...base, bundle_id: bundle.id });
      deps.bundles.invalidate(bundle.id); // its room shrank (other processes hear it from the change feed)
    } else {
      if (base.upload_length !== null && base.upload_length > uploader.maxBundleBytes) {
        throw new TusError(413, 'SIZE_EXCEEDED', 'Upload-Length exceeds the bundle size limit');
      }
      const description = cleanDescription(optional(meta.description));
      const problem = descriptionProblem(description);
      if (problem) throw new AppError(problem);
      const notifyEmail = optional(meta.notify_email);
      if (notifyEmail !== null && !isEmail(notifyEmail)) throw new AppError('INVALID_EMAIL');
      const sharing = sharingFields((name) => meta[name], caller, deps.reservedNames);
      await precheckSharing(deps.sql, sharing);
      const password = optional(meta.access_password);
      const newBundle = {
        sharing,
        description,
        accessPasswordHash: password === null ? null : await deps.passwords.hash(password),
        notifyEmail,
        isEncrypted: meta.encrypted === '1' || meta.encrypted === 'true',
        maxSizeBytes: uploader.maxBundleBytes,
        expiryDays: uploader.expiryDays,
      };
      await insertUpload(deps.sql, { ...base, new_bundle: newBundle });
    }
    if (partials) {
      await joinParts(partials.rows.map((r) => ({ path: partPathOf(dir, r.id), length: r.upload_length ?? 0 })), partPath);
      await setProgress(deps.sql, id, partials.length, partials.length);
    }
    const row = await findUpload(deps.sql, id);
    if (!row) throw new AppError('INTERNAL', 'tus upload row vanished');
    const location = `${deps.origin(ctx)}/api/v1/tus/${id}`;
    const complete = withBody || base.upload_length === 0 || partials !== null;
    const headers = complete ? await appendBody(ctx, deps, tap, row, partPath, checksum) : [];
    // Joined into a file: the partials are spent.
    if (partials && row.upload_offset === row.upload_length) await spendPartials(deps, partials.rows, (p) => partPathOf(dir, p));
    // Released before the answer goes out, so the client's next request never meets these leases.
    await partials?.release();
    if (ctx.aborted) return await discard(deps, id, partPath);
    const all: Array<readonly [string, string]> = [...NO_STORE, ['Location', location], ...headers];
    if (headers.length === 0) all.push(['Upload-Offset', '0'], ['Upload-Expires', httpDate(base.expires_at)]);
    send(ctx, 201, '', all);
  } catch (err) {
    if (partPath) await discard(deps, id, partPath);
    await partials?.release();
    return fail(err);
  }
}

/**
 * A client learns an upload's URL only from the 201: a creation answered with an error (460 or 413
 * on the first bytes, a failed write), or cut off by the client, leaves neither row nor part. Kept,
 * they were out of everyone's reach for 24 hours, and an append's row held its room in the bundle
 * all that time. The part goes only once the row is gone: a row never names a missing part (if the
 * database cannot be reached, the sweeper reclaims both at expiry).
 */
async function discard(deps: Deps, id: string, partPath: string): Promise<void> {
  const gone = await deleteUpload(deps.sql, id).then(() => true, () => false);
  if (gone) await fsp.rm(partPath, { force: true });
}

const optional = (v: string | undefined): string | null => (v === undefined || v === '' ? null : v);
