import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createPartWriter } from './part-writer.ts';
import { fsyncFile } from './dirs.ts';
import { BLOB_KEY_RE, type BlobAppender, type BlobStore, type UnsyncedRange } from '../blob-store.ts';
import { BlobError } from '../../errors.ts';
import { crc32 } from '../../util/crc32.mjs';
import type { DiskCore } from './core.ts';

type Resumables = Required<
  Pick<
    BlobStore,
    'createResumable' | 'append' | 'join' | 'completeResumable' | 'reopenResumable' | 'removeResumable' | 'syncedHere' | 'checkUnsynced'
  >
>;

/** Resumables whose last synced append this store remembers (see `synced`); forgetting one costs a check. */
const SYNCED_KEPT = 10_000;
const CHECK_PIECE = 1 << 20;

/**
 * Resumable objects on disk: one file per id under tus/, written by the same part writer as new
 * objects (ring, O_DIRECT, sync pacing), opened for append. The durable offset is the caller's
 * (tus keeps it in its row); the file may hold more after a crash in the middle of an append, and
 * every append and completion cuts that off first, so unacknowledged bytes never survive.
 */
export function diskResumables(core: DiskCore): Resumables {
  const { layout, hasher } = core;
  const partOf = (id: string): string => {
    if (!BLOB_KEY_RE.test(id)) throw new Error(`invalid resumable id ${JSON.stringify(id)}`);
    return path.join(layout.resumableDir, `${id}.part`);
  };
  /** Ids with an append open in this store: a second append to one of them is refused. */
  const open = new Set<string>();
  /**
   * The range each resumable's last append here synced (oldest forgotten first), so that a range on
   * record before its sync (tus) is not read back by the process that synced it.
   */
  const synced = new Map<string, UnsyncedRange>();
  function noteSynced(id: string, range: UnsyncedRange): void {
    synced.delete(id);
    synced.set(id, range);
    if (synced.size > SYNCED_KEPT) synced.delete(synced.keys().next().value!);
  }
  const syncedHere = (id: string, range: UnsyncedRange): boolean => {
    const s = synced.get(id);
    return s !== undefined && s.from === range.from && s.to === range.to && s.crc32 === range.crc32;
  };

  /** Reads `range` back: whether the file holds it whole with that CRC-32. */
  async function holds(file: string, range: UnsyncedRange): Promise<boolean> {
    const fh = await fsp.open(file, 'r');
    try {
      const buf = Buffer.allocUnsafe(Math.min(CHECK_PIECE, Math.max(1, range.to - range.from)));
      let crc = 0;
      for (let at = range.from; at < range.to; ) {
        const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, range.to - at), at);
        if (bytesRead === 0) return false;
        crc = crc32(buf.subarray(0, bytesRead), crc);
        at += bytesRead;
      }
      if (crc >>> 0 !== range.crc32) return false;
      // What was read may still be only in the page cache (the writer died before its sync).
      await fh.sync();
      return true;
    } finally {
      await fh.close();
    }
  }

  /**
   * Truncates to `size` when longer and makes the cut durable; the size the file had. The stat is
   * synchronous: the file's inode is in memory while it is being appended to, and a trip through
   * libuv's pool cost each PATCH about a tenth of a millisecond.
   */
  async function cutTo(file: string, size: number): Promise<number> {
    const have = fs.statSync(file).size;
    if (have > size) {
      await fsp.truncate(file, size);
      await fsyncFile(file);
    }
    return have;
  }

  return {
    async createResumable(id) {
      await fsp.writeFile(partOf(id), '', { flag: 'wx', mode: 0o600 });
    },

    async append(id, offset, opts): Promise<BlobAppender> {
      if (open.has(id)) throw new BlobError('BUSY', `resumable ${id} has an append in progress`);
      const file = partOf(id);
      open.add(id);
      // A range this store synced is being written again (it was dropped: see checkUnsynced's callers).
      if ((synced.get(id)?.to ?? 0) > offset) synced.delete(id);
      const feedKey = opts.hashAhead ? id : null;
      let error: Error | null = null;
      // The writer starts opening the file at once (part-file.ts); nothing is written before the body is piped.
      const part = createPartWriter(file, {
        hasher,
        io: core.io,
        count: core.count,
        append: { at: offset, feedKey },
        onError: (err) => (error ??= err),
      });
      try {
        if ((await cutTo(file, offset)) < offset) throw new BlobError('OFFSET_MISMATCH', `resumable ${id} holds fewer than ${offset} bytes`);
      } catch (err) {
        part.abort();
        open.delete(id);
        throw err;
      }
      let received = 0;
      let over = false;
      let done = false;
      const settle = async (durable: number): Promise<number> => {
        done = true;
        open.delete(id);
        // The hash state may have been fed past the durable offset: naming it makes the state
        // start over if so, and reads any bytes it missed.
        if (feedKey !== null) hasher.hashAhead(id, file, durable);
        return durable;
      };
      return {
        offset,
        write(chunk, transient) {
          if (over || done) return true;
          if (offset + received + chunk.length > opts.limit) {
            over = true;
            error ??= new BlobError('TOO_LARGE', `append goes past ${opts.limit} bytes`);
            return true;
          }
          received += chunk.length;
          return part.write(chunk, transient);
        },
        onDrain: (fn) => part.onDrain(fn),
        async finish(fopts = {}) {
          let wrote = 0;
          try {
            wrote = (await part.finish()).size;
          } catch (err) {
            // A failed write or sync: the append counts for nothing (its bytes were never acknowledged).
            error ??= err as Error;
            part.abort();
            await cutTo(file, offset).catch(() => {});
            return { offset: await settle(offset), error };
          }
          const end = fopts.cutTo ?? offset + wrote;
          if (fopts.cutTo !== undefined) await cutTo(file, fopts.cutTo);
          else if (wrote > 0 && error === null && fopts.crc32 !== undefined) noteSynced(id, { from: offset, to: end, crc32: fopts.crc32 });
          return { offset: await settle(end), error };
        },
        abort() {
          if (done) return;
          part.abort();
          void cutTo(file, offset)
            .catch(() => {})
            .then(() => settle(offset));
        },
      };
    },

    async join(id, sources) {
      const target = partOf(id);
      for (const s of sources) {
        if (s.length === 0) continue;
        await pipeline(
          fs.createReadStream(partOf(s.id), { start: 0, end: s.length - 1, highWaterMark: 1 << 20 }),
          fs.createWriteStream(target, { flags: 'a', highWaterMark: 1 << 20 }),
        );
      }
      await fsyncFile(target);
    },

    async completeResumable(id, size) {
      const file = partOf(id);
      const have = await cutTo(file, size);
      if (have < size) throw new BlobError('SHORT', `resumable ${id} holds ${have} bytes, ${size} expected`);
      synced.delete(id);
      // A hash worker reads the part in 1 MiB pieces; the appends had it hash their durable bytes,
      // so usually nothing is left (after a restart, or on another process, it reads from 0).
      const d = await hasher.digestFile(file, id);
      if (d.size !== size) throw new Error(`resumable ${id} digested ${d.size} bytes, ${size} expected`);
      const key = core.newKey();
      await core.publish(file, key);
      return { key, digest: { size, crc32: d.crc32, sha256: null } };
    },

    async reopenResumable(id, key) {
      await fsp.rename(layout.filePath(key), partOf(id));
    },

    async removeResumable(id) {
      synced.delete(id);
      await fsp.rm(partOf(id), { force: true });
    },

    syncedHere,

    async checkUnsynced(id, range) {
      if (syncedHere(id, range)) return true;
      const ok = await holds(partOf(id), range).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return false;
        throw err;
      });
      if (ok) noteSynced(id, range);
      return ok;
    },
  };
}
