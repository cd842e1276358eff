/**
 * One embedded PostgreSQL cluster made per test run and copied into each embedded server's DATA_DIR:
 * initdb and its file-system sync cost a server start most of a second of CPU, and the sync waits for
 * whatever other tests wrote. The server finds a cluster and starts it, as it does on every start but
 * the first (test/embedded-db.test.ts covers the first start itself).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { binaries, CLUSTER, ensureCluster } from '../../src/db/embedded-postgres.ts';
import { ownDir, RUN_VAR } from './reaper.ts';

export const TEMPLATE_PREFIX = 'sluice-pg-template-';
let made: Promise<string> | undefined;

/** The run's template cluster, made by whichever test process needs it first. */
function template(): Promise<string> {
  return (made ??= (async () => {
    const final = path.join(os.tmpdir(), `${TEMPLATE_PREFIX}${process.env[RUN_VAR] ?? process.pid}`);
    if (fs.existsSync(path.join(final, CLUSTER, 'PG_VERSION'))) return final;
    const temp = fs.mkdtempSync(`${final}.`);
    ownDir(temp);
    await ensureCluster(temp, binaries(), pino({ level: 'silent' }));
    try {
      fs.renameSync(temp, final);
    } catch {
      fs.rmSync(temp, { recursive: true, force: true }); // another process made it first
    }
    // A test file run on its own (no npm test around it) removes what it made.
    if (process.env[RUN_VAR] === undefined) process.once('exit', () => fs.rmSync(final, { recursive: true, force: true }));
    return final;
  })());
}

/** Puts a copy of the run's cluster into `dataDir` (a new, empty DATA_DIR). */
export async function seedCluster(dataDir: string): Promise<void> {
  const from = path.join(await template(), CLUSTER);
  const to = path.join(dataDir, CLUSTER);
  fs.cpSync(from, to, { recursive: true });
  // cpSync makes directories with the umask's mode; PostgreSQL refuses a data directory others can enter.
  const modes = (rel: string): void => {
    const st = fs.statSync(path.join(from, rel));
    if (!st.isDirectory()) return;
    fs.chmodSync(path.join(to, rel), st.mode & 0o7777);
    for (const name of fs.readdirSync(path.join(from, rel))) modes(path.join(rel, name));
  };
  modes('');
}
