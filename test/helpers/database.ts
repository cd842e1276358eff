import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import pino from 'pino';
import postgres from 'postgres';
import { connectDb, type Db } from '../../src/db/client.ts';
import { migrate } from '../../src/db/migrate.ts';
import type { Backend } from './server.ts';

const PG_ADMIN_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A new empty database on the test PostgreSQL server, named so parallel test files never collide. */
export async function createPgDatabase(): Promise<{ name: string; url: string }> {
  const name = `sluice_t_${randomBytes(6).toString('hex')}`;
  const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const u = new URL(PG_ADMIN_URL);
  u.pathname = `/${name}`;
  return { name, url: u.toString() };
}

/** Drops a database createPgDatabase made, whoever is still connected. */
export async function dropPgDatabase(name: string): Promise<void> {
  const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(`drop database if exists ${name} with (force)`).catch(() => {});
  await admin.end();
}

/** A migrated database of the backend's kind in this process: the embedded PostgreSQL or a fresh database on the test server. */
export async function database(backend: Backend): Promise<{ db: Db; dataDir: string; drop: () => Promise<void> }> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-db-'));
  const pg = backend === 'postgres' ? await createPgDatabase() : null;
  const db = await connectDb({ databaseUrl: pg?.url, dataDir, log: pino({ level: 'silent' }), max: 4 });
  await migrate(db.sql);
  return {
    db,
    dataDir,
    async drop() {
      await db.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
      if (pg) await dropPgDatabase(pg.name);
    },
  };
}
