import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import { anyBlocked } from '../db/abuse.ts';
import { recordFileHash, unhashedFiles } from '../db/file-hashes.ts';
import { type BlobStore } from '../storage/blob-store.ts';
import { isBlobError } from '../errors.ts';
import { digestStored } from '../storage/digest-stored.ts';

/**
 * Records the SHA-256 of files stored while nothing needed it (the blocklist was empty and scanning
 * off), reading each through the store (disk or S3) as a stream, so `block add` also finds the
 * bundles that held a file before its hash was blocked. A file whose hash turns out blocked has its
 * bundle quarantined at once. Only files with no hash are read, so an interrupted walk resumes where
 * it stopped; the sweeper finishes what `block add` did not, a bounded pass at a time.
 */
export interface HashBackfill {
  /**
   * Hashes files not hashed yet, from where the last pass stopped, until `files` or `bytes` (at
   * least one file) is reached or none is left; then the next pass starts over from the lowest id.
   */
  pass(limits: { files: number; bytes: number }): Promise<BackfillPass>;
  /**
   * The sweeper's share: one pass of a few files, only while something is blocked. Errors (the
   * store unreachable) are logged, not thrown: the next sweep tries again. The number of files hashed.
   */
  sweep(): Promise<number>;
}

export interface BackfillPass {
  hashed: number;
  /** Files whose bytes were not found (logged and passed over). */
  missing: number;
}

export interface BackfillDeps {
  sql: Sql;
  store: BlobStore;
  log: Logger;
  /** Who the quarantines are audited as; null: whoever blocked the hash. */
  operator: string | null;
  /** What the audit records of how the file was found. */
  note: string;
  /** Called for each file hashed, after its row is updated. */
  onFile?: (f: { size: number; quarantined: string | null }) => void;
}

/** Rows asked for at once: a pass may stop before it has used them all. */
const PAGE = 100;

export function createHashBackfill(deps: BackfillDeps): HashBackfill {
  const { sql, store, log } = deps;
  let after = 0;

  async function pass(limits: { files: number; bytes: number }): Promise<BackfillPass> {
    const r: BackfillPass = { hashed: 0, missing: 0 };
    let bytes = 0;
    const full = (): boolean => r.hashed + r.missing >= limits.files || bytes >= limits.bytes;
    while (!full()) {
      const page = await unhashedFiles(sql, after, Math.min(PAGE, limits.files - r.hashed - r.missing));
      if (page.length === 0) {
        after = 0;
        return r;
      }
      for (const f of page) {
        if (full()) return r;
        let sha: Buffer;
        try {
          sha = (await digestStored(store, f.storage_key)).sha256;
        } catch (err) {
          // Gone since the row was read (a bundle deleted meanwhile), or lost: the walk goes on.
          if (!isBlobError(err, 'NOT_FOUND')) throw err;
          log.warn({ fileId: f.id, key: f.storage_key }, 'a file to hash for the blocklist has no stored bytes');
          r.missing++;
          after = f.id;
          continue;
        }
        const code = await recordFileHash(sql, f.id, sha, deps.operator, deps.note);
        after = f.id;
        r.hashed++;
        bytes += f.size;
        if (code) log.info({ code, fileId: f.id, sha256: sha.toString('hex') }, 'bundle quarantined: it holds a blocked file');
        deps.onFile?.({ size: f.size, quarantined: code });
      }
    }
    return r;
  }

  async function sweep(): Promise<number> {
    try {
      if (!(await anyBlocked(sql))) return 0;
      return (await pass(SWEEP_PASS)).hashed;
    } catch (err) {
      log.error({ err }, 'hashing stored files for the blocklist failed: the next sweep tries again');
      return 0;
    }
  }

  return { pass, sweep };
}

/**
 * A sweeper pass reads at most this much: it holds the sweep lock meanwhile, and reading costs the
 * store's bandwidth and a core's time for the hash.
 */
const SWEEP_PASS = { files: 100, bytes: 512 * 1024 * 1024 };
