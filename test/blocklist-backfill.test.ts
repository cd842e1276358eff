import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { backends, startServer, storedPaths, type TestServer } from './helpers/server.ts';
import { tusCreate, tusMeta, tusPatch } from './helpers/tus.ts';
import { get, sha256, uploadFiles } from './abuse-util.ts';

// Files stored while nothing was blocked have no SHA-256 on record; `block add` and the sweeper hash them.

interface Up {
  short_code: string;
  files: Array<{ id: number }>;
}

for (const backend of backends()) {
  describe(`blocklist and files stored before their hash was blocked (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { SWEEP_INTERVAL_SECONDS: '86400' });
    });
    after(() => srv.close());

    const upload = async (files: Array<{ name: string; data: Buffer }>): Promise<Up> => {
      const r = await uploadFiles(srv, files);
      assert.equal(r.status, 201, JSON.stringify(r.json));
      return r.json as unknown as Up;
    };
    const unhashed = async (): Promise<number> => (await srv.sql<{ n: number }[]>`select count(*)::int as n from files where sha256 is null`)[0]!.n;
    const recorded = async (fileId: number): Promise<string | null> => {
      const [row] = await srv.sql<{ sha256: Buffer | null }[]>`select sha256 from files where id = ${fileId}`;
      return row!.sha256 ? Buffer.from(row!.sha256).toString('hex') : null;
    };
    const auditText = async (): Promise<string> => (await srv.cli(['audit'])).stdout;

    test('block add hashes files stored without a SHA-256 and quarantines the bundles holding the file (multipart and tus); the rest stay served', async () => {
      const bad = randomBytes(200 * 1024);
      const hash = sha256(bad);
      const good = randomBytes(5000);
      // Nothing is blocked yet and scanning is off: these rows get no SHA-256.
      const holder = await upload([{ name: 'bad.bin', data: bad }, { name: 'other.txt', data: randomBytes(10) }]);
      const fine = await upload([{ name: 'good.bin', data: good }]);
      const loc = await tusCreate(srv, bad.length, { 'upload-metadata': tusMeta({ filename: 'bad-by-tus.bin' }) });
      assert.equal((await tusPatch(srv, loc, 0, bad)).status, 204);
      const [tusRow] = await srv.sql<{ short_code: string }[]>`
        select b.short_code from files f join bundles b on b.id = f.bundle_id where f.name = 'bad-by-tus.bin'`;
      const tusCode = tusRow!.short_code;
      const stored = 4;
      assert.equal(await unhashed(), stored, 'no file recorded a hash');

      // A malformed hash is refused before anything is read or changed.
      for (const args of [['block', 'add', 'xyz'], ['block', 'add', hash.slice(1)], ['block', 'add', `${hash}0`], ['block', 'add', `${hash.slice(0, 63)}g`], ['block', 'add']]) {
        const r = await srv.cli(args);
        assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}`);
        assert.equal(r.stdout, '');
        assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
        assert.match(r.stderr, /invalid SHA-256|usage:/);
      }
      assert.equal(await unhashed(), stored, 'nothing hashed');
      assert.equal((await srv.sql`select count(*)::int as n from blocked_hashes`)[0]!.n, 0, 'nothing blocked');
      assert.equal(await auditText(), '', 'nothing audited');

      const add = await srv.cli(['block', 'add', hash, '--by', 'erin']);
      assert.equal(add.code, 0, add.stderr);
      assert.equal(add.stderr, '', 'quiet on success');
      const lines = add.stdout.trim().split('\n');
      const both = [holder.short_code, tusCode].sort();
      assert.equal(lines[0], `blocked ${hash}`);
      assert.match(lines[1]!, new RegExp(`^hashing ${stored} files \\(\\d+(\\.\\d)? KB\\) stored without a recorded SHA-256$`));
      assert.deepEqual(lines.slice(2, 2 + both.length).sort(), both.map((c) => `quarantined ${c}`));
      assert.equal(lines[2 + both.length], `hashed ${stored} files; quarantined ${both.length} more bundles: ${both.join(' ')}`);
      assert.equal(lines.length, 3 + both.length, add.stdout);

      for (const code of both) assert.equal((await get(srv, `/${code}`)).status, 451, code);
      // The file that matched nothing has its hash on record and is served as before.
      assert.equal(await recorded(fine.files[0]!.id), sha256(good));
      assert.equal((await get(srv, `/${fine.short_code}`)).status, 200);
      const dl = await request(`${srv.url}/d/${fine.files[0]!.id}`);
      assert.equal(dl.statusCode, 200);
      assert.ok(Buffer.from(await dl.body.arrayBuffer()).equals(good));
      assert.equal(await recorded(holder.files[0]!.id), hash);
      assert.equal(await unhashed(), 0);
      const audit = await auditText();
      assert.match(audit, new RegExp(`\\tblock add\\t${hash}\\terin\\t`));
      for (const code of both) assert.match(audit, new RegExp(`\\tbundles quarantine\\t${code}\\terin\\tholds blocked ${hash}; found by block add$`, 'm'));

      // Again: nothing is left to hash, and the bundles are found by their recorded hash (already held).
      const again = await srv.cli(['block', 'add', hash]);
      assert.equal(again.code, 0, again.stderr);
      assert.equal(again.stdout, `blocked ${hash}\n`);
      // And the file itself is refused from now on.
      const refused = await uploadFiles(srv, [{ name: 'bad-again.bin', data: bad }]);
      assert.equal(refused.status, 422);
      assert.equal(refused.json.code, 'BLOCKED_CONTENT');

      assert.equal((await srv.cli(['block', 'remove', hash])).code, 0);
      for (const code of both) assert.equal((await srv.cli(['bundles', 'release', code])).code, 0);
    });

    test('the sweeper hashes what block add did not, only while something is blocked, audited as whoever blocked the hash', async () => {
      const bad = randomBytes(3000);
      const hash = sha256(bad);
      const holder = await upload([{ name: 'bad.bin', data: bad }]);
      const fine = await upload([{ name: 'fine.bin', data: randomBytes(3000) }]);
      // As if stored before anything was blocked (the server may still hash uploads for a moment after the last remove).
      await srv.sql`update files set sha256 = null where id in ${srv.sql([holder.files[0]!.id, fine.files[0]!.id])}`;
      assert.equal(await unhashed(), 2);

      // Nothing blocked: the sweep reads nothing.
      const idle = await srv.cli(['sweep']);
      assert.equal(idle.code, 0, idle.stderr);
      assert.match(idle.stdout, /files hashed for the blocklist: 0$/m);
      assert.equal(await unhashed(), 2);

      // A hash blocked by a `block add` that stopped before it hashed anything.
      await srv.sql`insert into blocked_hashes (sha256, reason, created_by) values (${Buffer.from(hash, 'hex')}, 'interrupted', 'frank')`;
      const swept = await srv.cli(['sweep']);
      assert.equal(swept.code, 0, swept.stderr);
      assert.match(swept.stdout, /files hashed for the blocklist: 2$/m);
      assert.equal(await unhashed(), 0);
      assert.equal((await get(srv, `/${holder.short_code}`)).status, 451);
      assert.equal((await get(srv, `/${fine.short_code}`)).status, 200);
      assert.match(await auditText(), new RegExp(`\\tbundles quarantine\\t${holder.short_code}\\tfrank\\tholds blocked ${hash}; found by the sweeper$`, 'm'));

      assert.equal((await srv.cli(['block', 'remove', hash])).code, 0);
      assert.equal((await srv.cli(['bundles', 'release', holder.short_code])).code, 0);
    });

    test('block add passes over a file whose bytes are gone, says so, and exits 0', { skip: backend === 's3' && 'removes a file from the disk store' }, async () => {
      const lost = await upload([{ name: 'lost.bin', data: randomBytes(1000) }]);
      const kept = await upload([{ name: 'kept.bin', data: randomBytes(1000) }]);
      const ids = [lost.files[0]!.id, kept.files[0]!.id];
      await srv.sql`update files set sha256 = null where id in ${srv.sql(ids)}`;
      const [row] = await srv.sql<{ storage_key: string }[]>`select storage_key from files where id = ${ids[0]!}`;
      const rel = storedPaths(srv.dataDir).files.find((p) => p.endsWith(row!.storage_key))!;
      fs.rmSync(path.join(srv.dataDir, 'files', rel));

      const hash = sha256(randomBytes(32));
      const add = await srv.cli(['block', 'add', hash]);
      assert.equal(add.code, 0, add.stderr);
      assert.match(add.stdout, /^hashed 1 file; no other bundle holds a blocked file; 1 file had no stored bytes \(see the log\)$/m);
      assert.equal(await recorded(ids[0]!), null);
      assert.ok(await recorded(ids[1]!));
      assert.equal((await srv.cli(['block', 'remove', hash])).code, 0);
    });
  });
}
