import { AppError } from '../errors.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import type { Inspector } from './inspector.ts';

/**
 * `store` with every new file inspected before a row can name it (see Inspector): writers are
 * wrapped (and asked for a SHA-256 while scanning is on or something is blocked), and a completed
 * resumable is checked right after the store publishes it. A refused resumable (422) is deleted,
 * so nothing is kept; one the scanner could not check (503) becomes the resumable again.
 */
export function inspectedStore(store: BlobStore, inspector: Inspector): BlobStore {
  return {
    ...store,
    createWriter(opts = {}) {
      const onError = opts.onError ?? (() => {});
      const writer = store.createWriter({ ...opts, sha256: opts.sha256 === true || inspector.hashing() });
      return inspector.wrap(store, writer, onError);
    },
    async completeResumable(id, size) {
      const { key, digest } = await store.completeResumable(id, size);
      try {
        return { key, digest: await inspector.checkObject(store, key, digest) };
      } catch (err) {
        if (err instanceof AppError && err.status === 422) await store.delete(key);
        else await store.reopenResumable(id, key).catch(() => store.delete(key));
        throw err;
      }
    },
  };
}
