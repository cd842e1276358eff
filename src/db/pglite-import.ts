import fs from 'node:fs';
import path from 'node:path';

/** Where releases before the embedded PostgreSQL kept their embedded (PGlite) database. */
export const LEGACY_DIR = 'pg';

/**
 * A DATA_DIR an earlier release made holds its database in DATA_DIR/pg (PGlite). It is never
 * replaced or ignored: until its rows are imported, the embedded database does not start.
 */
export async function refuseLegacy(dataDir: string, clusterDir: string): Promise<void> {
  const legacy = path.join(dataDir, LEGACY_DIR);
  if (fs.existsSync(path.join(legacy, 'PG_VERSION')) && !fs.existsSync(clusterDir) && !fs.existsSync(path.join(legacy, 'IMPORTED'))) {
    throw new Error(`${legacy} holds the database of an earlier Sluice (PGlite); this version keeps it in ${clusterDir}: run \`sluice import-pglite\` once to copy it over`);
  }
}
