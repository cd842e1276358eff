import { AppError } from '../errors.ts';
import type { ChangeCheck, ChangeState } from '../db/bundle-room.ts';

/**
 * The one rule for changing a bundle. Every path that adds to, renames or removes from a bundle
 * runs it on the bundle's state under its row lock, in the transaction that commits the change
 * (db/bundle-room.ts lockForChange, which every such statement takes a check for); a path that reads
 * a body first runs it early too, so a refused client is told before it sends its bytes.
 */

/** What a change does: add files (or bytes toward one), rename (vanity), remove a file, delete it all. */
export type Change = 'add' | 'rename' | 'remove-file' | 'delete';

/**
 * Who asks: the owner's API key, or whoever holds a secret of the bundle (its upload token, a tus
 * upload's URL, or the link of the upload request it was made for).
 */
export type Actor = 'owner' | 'holder';

/**
 * Refuses a change, first match wins:
 * - quarantined: 451 for everything (its files are evidence, and its names stay held);
 * - made for an upload request that is closed or expired, or whose key is no longer active: its
 *   senders change nothing (404, as the closed request answers);
 * - expired: nothing but deleting it all (403 BUNDLE_EXPIRED);
 * - owner key revoked or expired: no more files and no renaming (401); its files may still be removed.
 */
export function refuseChange(state: ChangeState, change: Change, actor: Actor): void {
  if (state.quarantined_at !== null) throw new AppError('UNAVAILABLE_FOR_LEGAL_REASONS');
  if (actor === 'holder' && state.request_open !== null && !(state.request_open && state.owner_active !== false)) {
    throw new AppError('REQUEST_NOT_FOUND');
  }
  if (state.is_expired && change !== 'delete') throw new AppError('BUNDLE_EXPIRED');
  if (state.owner_active === false && (change === 'add' || change === 'rename')) {
    throw new AppError('INVALID_API_KEY', "The bundle's API key was revoked or has expired");
  }
}

/** The check a db statement runs under the bundle's row lock for this change. */
export const mayChange = (change: Change, actor: Actor): ChangeCheck => (state) => refuseChange(state, change, actor);

/**
 * For the operator's own commands and for undoing a creation that failed: no state refuses them
 * (an operator deletes a quarantined bundle on purpose).
 */
export const ANY_STATE: ChangeCheck = () => {};
