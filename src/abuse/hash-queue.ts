import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import { recordFileHash } from '../db/file-hashes.ts';
import { digestStored } from '../storage/digest-stored.ts';
import { isBlobError } from '../errors.ts';

/**
 * Hashes stored files an operator asks about (files stored while nothing needed a SHA-256), one
 * file at a time per process: reading a file costs the store's bandwidth and a core, and a file may
 * be 100 GB, so the work outlives the request that asked for it (which waits a little and then
 * says it goes on). Each hash is recorded like the backfill's (db/file-hashes.ts): a file whose
 * content turns out blocked has its bundle quarantined, audited under the operator who asked.
 */
export interface HashQueue {
  /**
   * Queues `files` (those already queued are not read twice); resolves, once each is hashed, with
   * the hex SHA-256 of each (null: its bytes are missing). A failure of the store rejects.
   */
  hash(files: readonly QueuedFile[], operator: string): Promise<Array<string | null>>;
  /** Whether file `id` is queued or being read now. */
  pending(id: number): boolean;
  /** Stops the file being read; what is queued is dropped. */
  close(): void;
}

export interface QueuedFile {
  readonly id: number;
  readonly storage_key: string;
}

export function createHashQueue(deps: { sql: Sql; store: BlobStore; log: Logger }): HashQueue {
  const queued = new Map<number, Promise<string | null>>();
  const stop = new AbortController();
  let tail: Promise<unknown> = Promise.resolve();

  const hashOne = async (f: QueuedFile, operator: string): Promise<string | null> => {
    if (stop.signal.aborted) throw new Error('hashing stopped');
    let sha: Buffer;
    try {
      sha = (await digestStored(deps.store, f.storage_key, stop.signal)).sha256;
    } catch (err) {
      if (!isBlobError(err, 'NOT_FOUND')) throw err;
      deps.log.warn({ fileId: f.id, key: f.storage_key }, 'a file to hash has no stored bytes');
      return null;
    }
    const held = await recordFileHash(deps.sql, f.id, sha, operator, 'hashed in the console');
    if (held) deps.log.info({ code: held, fileId: f.id }, 'bundle quarantined: it holds a blocked file');
    return sha.toString('hex');
  };

  const enqueue = (f: QueuedFile, operator: string): Promise<string | null> => {
    const known = queued.get(f.id);
    if (known) return known;
    const run = tail.then(() => hashOne(f, operator));
    const done = run.finally(() => queued.delete(f.id));
    queued.set(f.id, done);
    // The next file waits for this one, whether it succeeded or not.
    tail = done.catch(() => {});
    return done;
  };

  return {
    hash: (files, operator) => Promise.all(files.map((f) => enqueue(f, operator))),
    pending: (id) => queued.has(id),
    close: () => stop.abort(),
  };
}
