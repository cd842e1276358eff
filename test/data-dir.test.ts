/**
 * DATA_DIR holds the stored files, the secret and the embedded database: everything in it is
 * owner-only, and a DATA_DIR other users can write to is refused at start.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { backends, runCli, startServer, type TestServer } from './helpers/server.ts';
import { created } from './upload-util.ts';
import { file } from './helpers/http.ts';

/** Every path under `root` whose mode lets group or others in, with that mode. */
function open(root: string): string[] {
  const found: string[] = [];
  const walk = (p: string): void => {
    const st = fs.lstatSync(p);
    if (st.isSymbolicLink()) return;
    if ((st.mode & 0o077) !== 0) found.push(`${(st.mode & 0o777).toString(8)} ${path.relative(root, p)}`);
    if (st.isDirectory()) for (const name of fs.readdirSync(p)) walk(path.join(p, name));
  };
  walk(root);
  return found;
}

describe('a DATA_DIR others can write to', () => {
  let dir: string;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-open-'));
    fs.chmodSync(dir, 0o777);
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('stops serve and the CLI with one line naming it and what to do, leaving nothing in it', async () => {
    const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', DATA_DIR: dir, PORT: '0', HOST: '127.0.0.1' };
    for (const args of [['serve'], ['migrate']]) {
      const r = await runCli(args, env);
      assert.equal(r.code, 1, r.stderr);
      assert.equal(r.stderr, `sluice: DATA_DIR ${dir}: other users can write to it (mode 0777); run chmod 700 ${dir}, or point DATA_DIR elsewhere\n`);
    }
    assert.deepEqual(fs.readdirSync(dir), []);
  });
});

for (const backend of backends()) {
  describe(`DATA_DIR is owner-only (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    // As root where user namespaces are not allowed, the embedded PostgreSQL runs as nobody (it refuses
    // root): DATA_DIR itself then lets nobody's group pass (0710), without listing it.
    const rootPassage = backend === 'embedded' && process.getuid?.() === 0 ? '710 ' : null;
    test('whatever the umask, every directory is 0700 and every file 0600, the embedded database included', async () => {
      await created(srv, [file('a.txt', 'hello'), file('b.bin', Buffer.alloc(100_000, 1))]);
      // While serving, nothing under DATA_DIR is reachable by others: each directory is owner-only.
      const dirs = open(srv.dataDir).filter((e) => e !== rootPassage && fs.statSync(path.join(srv.dataDir, e.split(' ')[1]!)).isDirectory());
      assert.deepEqual(dirs, []);
      await srv.stop();
      assert.deepEqual(open(srv.dataDir).filter((e) => e !== rootPassage), []);
    });
  });
}
