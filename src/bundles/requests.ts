import type { Sql } from '../db/sql.ts';
import type { NewFile } from '../db/bundles.ts';
import type { FileRow, BundleRow } from '../db/rows.ts';
import { findOpenRequest, requestOfBundle, type OpenRequest } from '../db/requests.ts';
import { hashSecret, secretMatches } from '../util/tokens.ts';
import { AppError } from '../errors.ts';
import { appendParts, type BundleDeps } from './service.ts';
import { refuseChange } from './guard.ts';
import { changeState } from '../db/bundle-room.ts';
import type { ArrivalNotifier } from '../notify/arrivals.ts';

/**
 * Upload requests ("reverse shares") on the upload paths, shared by multipart
 * (POST /api/v1/requests/<token>/upload) and tus (metadata `request_token`): the token check, the
 * request's file limit on append, and the arrival mail to its key's e-mail.
 */

/** 256 random bits, URL-safe: the request link is the only credential its uploaders have. */
export const REQUEST_TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

/**
 * The open request a token names, compared in constant time, if the bundle guard lets its senders
 * add to its bundle; REQUEST_NOT_FOUND or the guard's refusal (a quarantined bundle: 451) otherwise.
 */
export async function resolveRequestToken(deps: { sql: Sql }, token: string): Promise<OpenRequest> {
  const r = REQUEST_TOKEN_RE.test(token) ? await findOpenRequest(deps.sql, hashSecret(token)) : undefined;
  if (!r || !secretMatches(token, r.token_hash)) throw new AppError('REQUEST_NOT_FOUND');
  const state = await changeState(deps.sql, r.bundle_id);
  if (!state) throw new AppError('REQUEST_NOT_FOUND');
  refuseChange(state, 'add', 'holder');
  return r;
}

/** A request's file limit, checked before any byte is kept (the row lock at commit decides races). */
export function checkRequestFiles(req: Pick<OpenRequest, 'file_count' | 'max_files'>, adding: number): void {
  if (req.file_count + adding > req.max_files) throw new AppError('TOO_MANY_FILES', `This upload request takes at most ${req.max_files} files`);
}

type RequestDeps = Pick<BundleDeps, 'sql' | 'bundles'> & { readonly arrivals?: ArrivalNotifier };

/** Commits files that arrived through request `req` into its bundle, within its max_files, and tells its key. */
export async function appendViaRequest(
  deps: RequestDeps,
  req: { id: number; bundle_id: number; max_files: number; notify_email: string | null },
  files: NewFile[],
  completingTus: string | null = null,
): Promise<{ rows: FileRow[]; bundle: BundleRow }> {
  const out = await appendParts(deps, req.bundle_id, files, completingTus, req.max_files);
  if (req.notify_email !== null) void deps.arrivals?.received(req.id, out.rows);
  return out;
}

/**
 * Commits a finished tus upload into bundle `bundleId`: through its request when the bundle is an
 * upload request's (`viaRequest`: its sender learns nothing of the bundle), else as a plain append.
 */
export async function appendToBundle(
  deps: RequestDeps,
  bundleId: number,
  files: NewFile[],
  completingTus: string | null,
): Promise<{ rows: FileRow[]; bundle: BundleRow; viaRequest: boolean }> {
  const req = await requestOfBundle(deps.sql, bundleId);
  if (req === undefined) return { ...(await appendParts(deps, bundleId, files, completingTus)), viaRequest: false };
  return { ...(await appendViaRequest(deps, { ...req, bundle_id: bundleId }, files, completingTus)), viaRequest: true };
}
