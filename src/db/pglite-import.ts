import fs from 'node:fs';
import path from 'node:path';
import type { Sql } from './sql.ts';

/** Where releases before the embedded PostgreSQL kept their embedded (PGlite) database. */
export const LEGACY_DIR = 'pg';
/** Written into the PGlite directory once its rows are in the new database; the directory itself is kept. */
const IMPORTED = 'IMPORTED_BY_SLUICE';

const legacyDir = (dataDir: string): string => path.join(dataDir, LEGACY_DIR);
export const hasLegacy = (dataDir: string): boolean =>
  fs.existsSync(path.join(legacyDir(dataDir), 'PG_VERSION')) && !fs.existsSync(path.join(legacyDir(dataDir), IMPORTED));

/**
 * A DATA_DIR an earlier release made holds its database in DATA_DIR/pg (PGlite). It is never
 * replaced or ignored: until its rows are imported, the embedded database does not start.
 */
export function refuseLegacy(dataDir: string, clusterDir: string): void {
  if (hasLegacy(dataDir)) {
    throw new Error(`${legacyDir(dataDir)} holds the database of an earlier Sluice (PGlite); this version keeps it in ${clusterDir}: run \`sluice import-pglite\` once to copy it over`);
  }
}

const BATCH = 2000;
const quote = (name: string): string => `"${name.replace(/"/g, '""')}"`;

/**
 * Copies every row of the PGlite database in DATA_DIR/pg into `sql` (migrated, and empty: its
 * tables are emptied first), in one transaction: all of it or nothing. Columns are matched by name,
 * so a PGlite database a few migrations behind imports too (a column it lacks gets its default).
 * Foreign keys and triggers are off during the copy (session_replication_role), sequences are set
 * past the largest id after it. The PGlite directory is left as it was, plus a marker file.
 */
export async function importPglite(dataDir: string, sql: Sql): Promise<Array<{ table: string; rows: number }>> {
  const dir = legacyDir(dataDir);
  if (!fs.existsSync(path.join(dir, 'PG_VERSION'))) throw new Error(`${dir} holds no PGlite database: nothing to import`);
  if (fs.existsSync(path.join(dir, IMPORTED))) throw new Error(`${dir} was imported already (${path.join(dir, IMPORTED)})`);
  const { PGlite } = await import('@electric-sql/pglite');
  const pg = await PGlite.create(dir);
  try {
    const columnsOf = async (q: (text: string) => Promise<Array<{ t: string; c: string }>>): Promise<Map<string, string[]>> => {
      const rows = await q(`select c.table_name as t, c.column_name as c from information_schema.columns c
        join information_schema.tables t using (table_schema, table_name)
        where c.table_schema = 'public' and t.table_type = 'BASE TABLE' and c.table_name <> 'schema_migrations'
          and c.is_generated = 'NEVER' order by c.table_name, c.ordinal_position`);
      const m = new Map<string, string[]>();
      for (const r of rows) m.set(r.t, [...(m.get(r.t) ?? []), r.c]);
      return m;
    };
    const target = await columnsOf((text) => sql.unsafe(text) as unknown as Promise<Array<{ t: string; c: string }>>);
    const source = await columnsOf(async (text) => (await pg.query<{ t: string; c: string }>(text)).rows);
    const counts: Array<{ table: string; rows: number }> = [];
    await sql.begin(async (tx) => {
      await tx.unsafe('set local session_replication_role = replica');
      if (target.size > 0) await tx.unsafe(`truncate ${[...target.keys()].map(quote).join(', ')}`);
      for (const [table, cols] of target) {
        const have = source.get(table);
        if (!have) continue;
        const list = cols.filter((c) => have.includes(c)).map(quote).join(', ');
        let rows = 0;
        for (let offset = 0; ; offset += BATCH) {
          const batch = await pg.query<{ j: string }>(
            `select coalesce(json_agg(x), '[]')::text as j from (select ${list} from ${quote(table)} order by ctid offset ${offset} limit ${BATCH}) x`,
          );
          const json = batch.rows[0]!.j;
          if (json === '[]') break;
          const r = await tx.unsafe(`insert into ${quote(table)} (${list}) select ${list} from json_populate_recordset(null::${quote(table)}, $1::text::json)`, [json]);
          rows += r.count;
        }
        counts.push({ table, rows });
      }
      // Serial and identity columns continue after the imported ids.
      const seqs = await tx<{ seq: string; tbl: string; col: string }[]>`
        select s.relname as seq, t.relname as tbl, a.attname as col from pg_depend d
        join pg_class s on s.oid = d.objid and s.relkind = 'S'
        join pg_class t on t.oid = d.refobjid
        join pg_namespace n on n.oid = t.relnamespace and n.nspname = 'public'
        join pg_attribute a on a.attrelid = t.oid and a.attnum = d.refobjsubid`;
      for (const s of seqs) {
        await tx.unsafe(`select setval(${`'${quote(s.seq).replace(/'/g, "''")}'`}, coalesce((select max(${quote(s.col)}) from ${quote(s.tbl)}), 0) + 1, false)`);
      }
    });
    fs.writeFileSync(path.join(dir, IMPORTED), `${new Date().toISOString()}\n`);
    return counts;
  } finally {
    await pg.close().catch(() => {});
  }
}
