import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Sql } from '../db/client.ts';
import { isAlive, writerAlive } from '../util/process-tag.ts';
import type { Disk } from '../storage/disk.ts';
import { sweepTus } from '../tus/sweep.ts';

export interface SweepResult {
  expiredBundles: number;
  expiredFiles: number;
  staleParts: number;
  orphanFiles: number;
  cacheFiles: number;
  /** Expired tus sessions and parts no session names. */
  tusUploads: number;
}

export interface SweepOptions {
  /** Parts whose name names no process are removed after this long. */
  partIdleMs?: number;
  /** Stored files without a row, older than this, are leftovers of a crash between rename and commit. */
  orphanGraceMs?: number;
}

/**
 * One pass of clean-up: expired bundles and their bytes, temp parts of dead or stalled writers,
 * and stored files that no committed row references. Safe to run beside live servers.
 */
export async function sweep(sql: Sql, disk: Disk, opts: SweepOptions = {}): Promise<SweepResult> {
  const result: SweepResult = { expiredBundles: 0, expiredFiles: 0, staleParts: 0, orphanFiles: 0, cacheFiles: 0, tusUploads: 0 };
  // tus sessions first: expiring a bundle cascades to its sessions, whose parts only this pass removes.
  result.tusUploads = await sweepTus(sql, disk, opts.partIdleMs ?? 15 * 60_000);
  await sweepExpired(sql, disk, result);
  result.staleParts = await sweepParts(disk.tmpDir, opts.partIdleMs ?? 15 * 60_000);
  result.orphanFiles = await sweepOrphans(sql, disk, opts.orphanGraceMs ?? 15 * 60_000);
  result.cacheFiles = await sweepCache(disk.cacheDir, 24 * 3_600_000);
  return result;
}

async function sweepExpired(sql: Sql, disk: Disk, result: SweepResult): Promise<void> {
  for (;;) {
    // Batches keep each transaction short; rows go first, then bytes (a crash in between leaves
    // orphans that the orphan pass reclaims).
    const keys = await sql.begin(async (tx) => {
      const ids = await tx<{ id: number }[]>`
        select id from bundles where expires_at is not null and expires_at <= now() and quarantined_at is null
        limit 200 for update skip locked`;
      if (ids.length === 0) return null;
      const list = ids.map((r) => r.id);
      const files = await tx<{ storage_key: string }[]>`select storage_key from files where bundle_id = any(${list})`;
      await tx`delete from bundles where id = any(${list})`;
      result.expiredBundles += ids.length;
      return files.map((f) => f.storage_key);
    });
    if (keys === null) break;
    await Promise.all(keys.map((k) => disk.remove(k)));
    result.expiredFiles += keys.length;
  }
}

/** Derived files (share cards) not touched for `maxAgeMs` are dropped; they are regenerated on demand. */
async function sweepCache(dir: string, maxAgeMs: number): Promise<number> {
  let removed = 0;
  const now = Date.now();
  const entries = (await fsp.readdir(dir, { recursive: true }).catch(() => [] as string[])) as string[];
  for (const rel of entries) {
    const p = path.join(dir, rel);
    const st = await fsp.stat(p).catch(() => null);
    if (st?.isFile() && now - st.mtimeMs > maxAgeMs) {
      await fsp.rm(p, { force: true });
      removed++;
    }
  }
  return removed;
}

async function sweepParts(tmpDir: string, idleMs: number): Promise<number> {
  let removed = 0;
  const now = Date.now();
  for (const name of await fsp.readdir(tmpDir).catch(() => [] as string[])) {
    const p = path.join(tmpDir, name);
    // <pid>-<start tag>-<random>.part; before tags, <pid>-<random>.part (24 hex digits)
    const m = /^(\d+)-(?:([0-9a-f]{8})-)?[0-9a-f]{24}\.part$/.exec(name);
    const pid = Number(m?.[1]);
    const st = await fsp.stat(p).catch(() => null);
    if (!st) continue;
    // A live process's finished parts sit untouched until its request commits them (a long
    // multi-file upload can take hours): only a dead writer's parts are leftovers. A tagged part
    // whose pid runs again as another process (a container's pid 1 after a crash) is one too.
    const named = m !== null && pid > 0;
    const tag = m?.[2];
    const deadWriter = named && (tag === undefined ? pid !== process.pid && !isAlive(pid) : !writerAlive(pid, tag));
    if (deadWriter || (!named && now - st.mtimeMs > idleMs)) {
      await fsp.rm(p, { force: true });
      removed++;
    }
  }
  return removed;
}

async function sweepOrphans(sql: Sql, disk: Disk, graceMs: number): Promise<number> {
  let removed = 0;
  const now = Date.now();
  for (const a of await fsp.readdir(disk.filesDir).catch(() => [] as string[])) {
    for (const b of await fsp.readdir(path.join(disk.filesDir, a)).catch(() => [] as string[])) {
      const dir = path.join(disk.filesDir, a, b);
      const names = await fsp.readdir(dir).catch(() => [] as string[]);
      const keys = [...new Set(names.map((n) => n.slice(0, 32)).filter((k) => /^[0-9a-f]{32}$/.test(k)))];
      if (keys.length === 0) continue;
      const known = new Set(
        (await sql<{ storage_key: string }[]>`select storage_key from files where storage_key = any(${keys})`).map(
          (r) => r.storage_key,
        ),
      );
      for (const name of names) {
        if (known.has(name.slice(0, 32))) continue;
        const p = path.join(dir, name);
        const st = await fsp.stat(p).catch(() => null);
        if (st && now - st.mtimeMs >= graceMs) {
          await fsp.rm(p, { force: true });
          removed++;
        }
      }
    }
  }
  return removed;
}
