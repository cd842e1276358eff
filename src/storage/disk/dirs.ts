import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomHex } from '../../util/random.ts';

/**
 * A stored file's key starts with its shard (files/ab/cd/). Consecutive files share a shard for a
 * run of SHARD_RUN keys, then a random next shard is drawn: shards still fill evenly in the long run,
 * but a burst of small uploads creates a directory once per run instead of once per file, and
 * concurrent publishes into one directory share its fsync. The other 112 bits stay random.
 */
const SHARD_RUN = 256;

/** A key maker with its own shard run (one per store). */
export function shardedKeys(): () => string {
  let shard = '';
  let uses = SHARD_RUN;
  return () => {
    if (uses >= SHARD_RUN) {
      shard = randomHex(2);
      uses = 0;
    }
    uses++;
    return shard + randomHex(14);
  };
}

/**
 * Wraps a per-key task so that callers arriving while it runs share ONE next run (started when the
 * current one ends) instead of each queueing their own: a directory fsync started after a caller's
 * rename covers that rename, whoever asked for it.
 */
export function coalesced(task: (key: string) => Promise<void>): (key: string) => Promise<void> {
  const keys = new Map<string, { tail: Promise<void>; queued: Promise<void> | null }>();
  return (key) => {
    const entry = keys.get(key) ?? { tail: Promise.resolve(), queued: null };
    if (entry.queued) return entry.queued;
    const run = entry.tail.then(() => {
      entry.queued = null;
      return task(key);
    });
    const tail = run.then(
      () => {},
      () => {},
    );
    entry.queued = run;
    entry.tail = tail;
    keys.set(key, entry);
    void tail.then(() => {
      if (entry.tail === tail) keys.delete(key);
    });
    return run;
  };
}

export async function fsyncDir(dir: string): Promise<void> {
  const fd = await new Promise<number>((resolve, reject) =>
    fs.open(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY, (err, fd) => (err ? reject(err) : resolve(fd))),
  );
  try {
    await new Promise<void>((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
  } finally {
    fs.close(fd, () => {});
  }
}

/** fsyncs a file by path (a cut-back tail, a joined resumable). */
export async function fsyncFile(file: string): Promise<void> {
  const fh = await fsp.open(file, 'r+');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Makes a shard directory (files/ab/cd) durable before its first use by this store: both levels'
 * entries are fsynced in their parents, even when the directories already existed, since another
 * process may have just made them and not yet synced (two fsyncs per shard run of files).
 */
export function shardDirs(syncDir: (dir: string) => Promise<void>): { ensure(dir: string): Promise<void>; forget(dir: string): void } {
  const known = new Set<string>();
  const making = new Map<string, Promise<void>>();
  return {
    ensure(dir) {
      if (known.has(dir)) return Promise.resolve();
      let p = making.get(dir);
      if (!p) {
        p = (async () => {
          await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
          await Promise.all([syncDir(path.dirname(dir)), syncDir(path.dirname(path.dirname(dir)))]);
          known.add(dir);
        })().finally(() => making.delete(dir));
        making.set(dir, p);
      }
      return p;
    },
    forget: (dir) => void known.delete(dir),
  };
}
