import type { Sql } from '../db/sql.ts';
import { appendFiles, deleteBundle, findBundleById, findBundleByTokenHash, MAX_FILES_PER_BUNDLE, type NewFile } from '../db/bundles.ts';
import { type BundleRow, type FileRow } from '../db/rows.ts';
import type { BundleWriter } from '../db/bundle-writer.ts';
import type { NewBundleFields } from '../db/bundles.ts';
import type { BundleCache } from '../state/bundle-cache.ts';
import type { Caller, Passwords } from '../auth/caller.ts';
import { hashSecret, newUploadToken, secretMatches, UPLOAD_TOKEN_RE } from '../util/tokens.ts';
import { AppError } from '../errors.ts';
import { cleanDescription, descriptionProblem, isEmail } from '../util/names.ts';
import { DAY_MS } from '../util/time.ts';
import { checkVanity } from './vanity.ts';
import { parseMaxDownloads } from './limits.ts';
import { parseExpiryDays } from './expiry.ts';
import { checkVanityFree, claimVanity } from '../db/vanity.ts';
import { ANY_STATE, mayChange, refuseChange } from './guard.ts';
import { changeState } from '../db/bundle-room.ts';

/**
 * The domain side of storing files into bundles, shared by multipart uploads (routes/upload.ts) and
 * tus (tus/create.ts, tus/complete.ts): the fields a new bundle takes, the upload-token check, and
 * the row commits that follow a published object. Bytes are never handled here (see src/storage):
 * callers publish first, then call createFromParts/appendParts, and delete the objects if these fail.
 */

/** A new bundle's fields as the client sent them (form fields, or tus Upload-Metadata). */
export type RawBundleFields = Readonly<Record<string, string | undefined>>;


export interface BundleLimits {
  readonly apiKeyId: number | null;
  readonly maxBundleBytes: number;
  readonly expiryDays: number | null;
}

export interface BundleDeps {
  readonly sql: Sql;
  readonly passwords: Passwords;
  readonly newBundles: BundleWriter;
  readonly bundles: BundleCache;
  /** Names a vanity URL may not take (bundles/vanity.ts). */
  readonly reservedNames: ReadonlySet<string>;
}

/** Who uploads, as the checks of some fields need it (a vanity name needs a Premium key). */
interface FieldContext {
  readonly caller: Caller;
  /** The caller's plan's expiry in days (null: never), which `expires_in_days` may only shorten. */
  readonly expiryDays: number | null;
  readonly reservedNames: ReadonlySet<string>;
}

const optional = (v: string | undefined): string | null => (v === undefined || v === '' ? null : v);

/**
 * The text fields a new bundle takes, by their form (and tus metadata) name, checked in this order.
 * A new field (max_downloads, vanity) is one entry here and a column in NewBundleFields; both
 * upload paths pick it up, and multipart refuses a file part sent under its name.
 */
const FIELD_CHECKS: Readonly<Record<string, (raw: RawBundleFields, out: NewBundleFields, cx: FieldContext) => void>> = {
  description(raw, out) {
    out.description = cleanDescription(optional(raw.description));
    const problem = descriptionProblem(out.description);
    if (problem) throw new AppError(problem);
  },
  notify_email(raw, out) {
    out.notifyEmail = optional(raw.notify_email);
    if (out.notifyEmail !== null && !isEmail(out.notifyEmail)) throw new AppError('INVALID_EMAIL');
  },
  encrypted(raw, out) {
    out.isEncrypted = raw.encrypted === '1' || raw.encrypted === 'true';
  },
  // A Premium key's name for the bundle (401 anonymous, 403 another plan, 400 a bad or reserved name).
  vanity(raw, out, cx) {
    const name = optional(raw.vanity);
    out.vanity = name === null ? null : checkVanity(name, cx.caller, cx.reservedNames);
  },
  max_downloads(raw, out) {
    out.maxDownloads = parseMaxDownloads(raw.max_downloads);
  },
  expires_in_days(raw, out, cx) {
    out.expiryDays = parseExpiryDays(raw.expires_in_days, cx.expiryDays);
  },
};

/** Every text field name of a new bundle, the password's included. */
export const BUNDLE_FIELD_NAMES: ReadonlySet<string> = new Set([...Object.keys(FIELD_CHECKS), 'access_password']);

/**
 * Checks a new bundle's fields and hashes its password (last: the costly step runs only for valid
 * input). A vanity name already taken is refused here, before any row is written; the claim after
 * the insert still decides races (createFromParts).
 */
export async function validateFields(
  deps: Pick<BundleDeps, 'passwords' | 'sql' | 'reservedNames'>,
  raw: RawBundleFields,
  limits: BundleLimits,
  caller: Caller,
): Promise<NewBundleFields> {
  const out: NewBundleFields = {
    description: null,
    accessPasswordHash: null,
    notifyEmail: null,
    isEncrypted: false,
    maxSizeBytes: limits.maxBundleBytes,
    expiryDays: limits.expiryDays,
    vanity: null,
    maxDownloads: null,
  };
  const cx: FieldContext = { caller, reservedNames: deps.reservedNames, expiryDays: limits.expiryDays };
  for (const check of Object.values(FIELD_CHECKS)) check(raw, out, cx);
  if (out.vanity) await checkVanityFree(deps.sql, out.vanity, limits.apiKeyId);
  const password = optional(raw.access_password);
  out.accessPasswordHash = password === null ? null : await deps.passwords.hash(password);
  return out;
}

/** A request's file count: at least one, at most what a bundle holds. */
export function checkFileCount(n: number): void {
  if (n === 0) throw new AppError('NO_FILES');
  if (n > MAX_FILES_PER_BUNDLE) throw new AppError('TOO_MANY_FILES');
}

/**
 * The bundle an upload token opens, if the bundle guard lets its holder add to it, with the room
 * left in it; INVALID_UPLOAD_TOKEN or the guard's refusal otherwise.
 */
export async function resolveUploadToken(deps: Pick<BundleDeps, 'sql'>, token: string): Promise<BundleRow & { room: number }> {
  if (!UPLOAD_TOKEN_RE.test(token)) throw new AppError('INVALID_UPLOAD_TOKEN');
  const bundle = await findBundleByTokenHash(deps.sql, hashSecret(token));
  if (!bundle || !secretMatches(token, bundle.upload_token_hash)) throw new AppError('INVALID_UPLOAD_TOKEN');
  const state = await changeState(deps.sql, bundle.id);
  if (!state) throw new AppError('INVALID_UPLOAD_TOKEN');
  refuseChange(state, 'add', 'holder');
  return { ...bundle, room: state.room };
}

export interface CreatedBundle {
  readonly bundle: BundleRow;
  readonly files: FileRow[];
  /** Shown once, to the uploader. */
  readonly uploadToken: string;
}

/**
 * Commits a new bundle with its (already published) files, then claims its vanity name: a racing
 * upload that won the name makes this one VANITY_TAKEN, its rows deleted (the caller removes the
 * objects as for any failed upload).
 */
export async function createFromParts(
  deps: Pick<BundleDeps, 'newBundles' | 'sql'>,
  fields: NewBundleFields,
  apiKeyId: number | null,
  files: NewFile[],
  token = newUploadToken(),
): Promise<CreatedBundle> {
  const { bundle, files: rows } = await deps.newBundles.insert(
    {
      uploadTokenHash: hashSecret(token),
      description: fields.description,
      accessPasswordHash: fields.accessPasswordHash,
      notifyEmail: fields.notifyEmail,
      isEncrypted: fields.isEncrypted,
      apiKeyId,
      maxSizeBytes: fields.maxSizeBytes,
      expiresAt: fields.expiryDays === null ? null : new Date(Date.now() + fields.expiryDays * DAY_MS),
      maxDownloads: fields.maxDownloads ?? null,
    },
    files,
  );
  const vanity = fields.vanity ?? null;
  if (vanity !== null) {
    try {
      // (false: the bundle went away meanwhile, which nobody could have done before learning its code)
      if (!(await claimVanity(deps.sql, bundle.id, vanity, mayChange('rename', 'owner')))) throw new AppError('VANITY_TAKEN');
    } catch (err) {
      await deleteBundle(deps.sql, bundle.id, ANY_STATE);
      throw err;
    }
  }
  return { bundle: { ...bundle, vanity }, files: rows, uploadToken: token };
}

/**
 * Commits (already published) files into an existing bundle under its row lock, if the bundle guard
 * lets its holder add to it, within its cap and `maxFiles` (an upload request's max_files);
 * `completingTus` names the tus upload they finish (see appendFiles). Returns the rows and the bundle.
 */
export async function appendParts(
  deps: Pick<BundleDeps, 'sql' | 'bundles'>,
  bundleId: number,
  files: NewFile[],
  completingTus: string | null = null,
  maxFiles = MAX_FILES_PER_BUNDLE,
): Promise<{ rows: FileRow[]; bundle: BundleRow }> {
  const rows = await appendFiles(deps.sql, bundleId, files, mayChange('add', 'holder'), completingTus, maxFiles);
  deps.bundles.invalidate(bundleId);
  const bundle = await findBundleById(deps.sql, bundleId);
  if (!bundle) throw new AppError('INVALID_UPLOAD_TOKEN');
  return { rows, bundle };
}

/** Undoes createFromParts when its uploader went away before learning the token. */
export const removeBundle = (deps: Pick<BundleDeps, 'sql'>, bundleId: number): Promise<string[]> => deleteBundle(deps.sql, bundleId, ANY_STATE);
