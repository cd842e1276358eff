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
import { prerequisite } from './helpers/prereq.ts';

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

  test('a DATA_DIR that cannot be made (/proc/sluice) stops serve at once with one line, not a hang', async () => {
    const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', DATA_DIR: '/proc/sluice', PORT: '0', HOST: '127.0.0.1' };
    const r = await runCli(['serve'], env);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^sluice: DATA_DIR \/proc\/sluice: ENOENT: no such file or directory, mkdir '\/proc\/sluice'\n$/);
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

describe('directories under DATA_DIR are the server\'s own, and stored files are opened only as themselves', () => {
  // Only root can hand a directory to another user here.
  const asRoot = process.getuid?.() === 0 ? false : 'needs root to chown a directory to another user';
  let srv: TestServer;
  before(async () => {
    srv = await startServer('embedded');
  });
  after(async () => {
    await srv?.close();
  });

  test('a stored file swapped for a symbolic link is not served (404), whatever it points to', async () => {
    const b = await created(srv, [file('a.txt', 'hello'), file('pic.png', Buffer.alloc(10, 1))]);
    const secret = path.join(srv.dataDir, 'secret');
    for (const f of b.files) {
      const [stored] = (await srv.sql<{ k: string }[]>`select storage_key as k from files where id = ${f.id}`);
      const p = path.join(srv.dataDir, 'files', stored!.k.slice(0, 2), stored!.k.slice(2, 4), stored!.k);
      fs.rmSync(p);
      fs.symlinkSync(secret, p);
    }
    for (const url of [b.files[0]!.download_url, `/d/${b.files[0]!.id}`, `/d/${b.files[1]!.id}?preview=1`]) {
      const r = await fetch(`${srv.url}${url}`);
      const body = Buffer.from(await r.arrayBuffer());
      assert.equal(r.status, 404, `${url}: ${r.status}`);
      assert.ok(!body.includes(fs.readFileSync(secret)), `${url} leaked the secret`);
    }
    const zip = Buffer.from(await (await fetch(`${srv.url}/zip/${b.short_code}`)).arrayBuffer());
    assert.ok(!zip.includes(fs.readFileSync(secret)), 'the zip leaked the secret');
  });

  test('at start, a directory others may write is made owner-only; a linked or foreign one stops start-up naming it', { skip: prerequisite({ what: 'foreign directories under DATA_DIR', missing: asRoot, install: 'run the tests as root' }) }, async () => {
    await srv.stop();
    const shard = path.join(srv.dataDir, 'files', 'ab', 'cd');
    fs.mkdirSync(shard, { recursive: true });
    fs.chmodSync(path.join(srv.dataDir, 'files'), 0o777);
    fs.chmodSync(shard, 0o777);
    await srv.restart();
    assert.equal(fs.statSync(path.join(srv.dataDir, 'files')).mode & 0o777, 0o700);
    assert.equal(fs.statSync(shard).mode & 0o777, 0o700);
    await srv.stop();

    const env = { ...srv.env };
    fs.chownSync(shard, 65534, 65534);
    let r = await runCli(['serve'], env);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`${shard.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} belongs to uid 65534`));
    fs.rmSync(shard, { recursive: true });
    fs.symlinkSync(os.tmpdir(), shard);
    r = await runCli(['serve'], env);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /is a symbolic link/);
    fs.rmSync(shard);
    await srv.restart();
  });
});
