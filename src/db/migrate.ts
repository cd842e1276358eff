import fsp from 'node:fs/promises';
import type { Sql } from './sql.ts';
import { fromRoot } from '../paths.ts';
import path from 'node:path';

const SQL_DIR = fromRoot('sql');

/**
 * Applies forward-only migrations sql/NNNN_name.sql in one transaction under an advisory lock, so
 * concurrent starts serialize and each migration runs exactly once. Returns the names applied.
 */
export async function migrate(sql: Sql): Promise<string[]> {
  const files = (await fsp.readdir(SQL_DIR)).filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f)).sort();
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(7262001)`;
    await tx`create table if not exists schema_migrations (
      version int primary key, name text not null, applied_at timestamptz not null default now())`;
    const done = new Set((await tx<{ version: number }[]>`select version from schema_migrations`).map((r) => r.version));
    const applied: string[] = [];
    for (const file of files) {
      const version = Number(file.slice(0, 4));
      if (done.has(version)) continue;
      // Our own migration text, never user input.
      await tx.unsafe(await fsp.readFile(path.join(SQL_DIR, file), 'utf8')).simple();
      await tx`insert into schema_migrations (version, name) values (${version}, ${file})`;
      applied.push(file);
    }
    return applied;
  });
}
