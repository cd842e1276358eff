import type { Sql } from '../db/client.ts';
import type { Caller } from '../routes/deps.ts';
import type { BundleCache } from '../state/bundle-cache.ts';
import { AppError } from '../errors.ts';
import { deleteBundle } from '../db/bundles.ts';
import { checkVanity, claimVanity, vanityFree, vanityUrl } from './vanity.ts';
import { parseMaxDownloads } from './limits.ts';

/** What an upload (multipart fields or tus metadata) asks of a new bundle beyond the interface. */
export interface SharingFields {
  readonly vanity: string | null;
  /** Complete downloads allowed of each file (1–1000); null: no limit. */
  readonly maxDownloads?: number | null;
}

export const NO_SHARING: SharingFields = { vanity: null, maxDownloads: null };

/**
 * Reads and checks the sharing fields of a new bundle's upload; throws the 4xx naming the field.
 * `get` returns a field's value, '' or undefined when it was not sent.
 */
export function sharingFields(get: (field: string) => string | undefined, caller: Caller, reserved: ReadonlySet<string>): SharingFields {
  const vanity = get('vanity') || null;
  const maxDownloads = parseMaxDownloads(get('max_downloads'));
  return { vanity: vanity === null ? null : checkVanity(vanity, caller, reserved), maxDownloads };
}

/** Refuses a name already taken before any bytes are kept (the claim after insert still decides races). */
export async function precheckSharing(sql: Sql, s: SharingFields): Promise<void> {
  if (s.vanity !== null && !(await vanityFree(sql, s.vanity))) throw new AppError('VANITY_TAKEN');
}

/**
 * Applies the fields to the bundle just inserted, before its creator learns of it. On failure (a
 * racing upload won the name) the bundle's rows are deleted and the error rethrown: the caller
 * removes the stored bytes as for any failed upload.
 */
export async function applySharing(deps: { sql: Sql; bundles: BundleCache }, bundleId: number, s: SharingFields): Promise<void> {
  if (s.vanity === null && !s.maxDownloads) return;
  try {
    if (s.maxDownloads) await deps.sql`update bundles set max_downloads = ${s.maxDownloads} where id = ${bundleId}`;
    if (s.vanity !== null) await claimVanity(deps.sql, bundleId, s.vanity);
  } catch (err) {
    await deleteBundle(deps.sql, bundleId);
    throw err;
  } finally {
    deps.bundles.invalidate(bundleId);
  }
}

/** The answer's additions: `vanity_url` and `max_downloads` when given. */
export function sharingJson(s: SharingFields): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (s.vanity !== null) out.vanity_url = vanityUrl(s.vanity);
  if (s.maxDownloads) out.max_downloads = s.maxDownloads;
  return out;
}
