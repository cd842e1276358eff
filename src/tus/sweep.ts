import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Sql } from '../db/client.ts';
import type { Disk } from '../storage/disk.ts';

/**
 * Drops expired tus sessions and the parts of unfinished ones, then parts that no row names
 * (a crash between creating the part and its row, or a bundle deleted under an append) once they
 * are older than `graceMs`. Completed sessions have no part: their file belongs to the bundle.
 */
export async function sweepTus(sql: Sql, disk: Disk, graceMs = 15 * 60_000): Promise<number> {
  const dir = path.join(path.dirname(disk.filesDir), 'tus');
  let removed = 0;
  for (;;) {
    const ids = await sql<{ id: string; completed: boolean }[]>`
      delete from tus_uploads where id in (
        select id from tus_uploads where expires_at <= now() limit 200 for update skip locked)
      returning id, completed_at is not null as completed`;
    if (ids.length === 0) break;
    await Promise.all(ids.filter((r) => !r.completed).map((r) => fsp.rm(path.join(dir, `${r.id}.part`), { force: true })));
    removed += ids.length;
  }
  const names = (await fsp.readdir(dir).catch(() => [] as string[])).filter((n) => /^[0-9a-f]{32}\.part$/.test(n));
  if (names.length === 0) return removed;
  const known = new Set(
    (await sql<{ id: string }[]>`select id from tus_uploads where id = any(${names.map((n) => n.slice(0, 32))})`).map((r) => r.id),
  );
  const now = Date.now();
  for (const name of names) {
    if (known.has(name.slice(0, 32))) continue;
    const st = await fsp.stat(path.join(dir, name)).catch(() => null);
    if (st && now - st.mtimeMs >= graceMs) {
      await fsp.rm(path.join(dir, name), { force: true });
      removed++;
    }
  }
  return removed;
}
