/**
 * `sluice storage migrate`: a disk installation's files copied into a radosgw bucket while its server
 * runs, verified, resumable after kill -9, refusing corrupt sources; then the server on STORAGE_URL
 * serves every file as it was uploaded.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { HeadObjectCommand, ListMultipartUploadsCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';
import { ROOT, runCli, startServer, type TestServer } from './helpers/server.ts';
import { uploaded, type Json } from './helpers/http.ts';
import { diskLayout } from '../src/storage/disk/store.ts';
import { loadConfig } from '../src/config.ts';
import { modeLine } from '../src/cli/banner.ts';

const skip = cephSkip('sluice storage migrate (test/storage-migrate.test.ts)');
const MIB = 1024 * 1024;
const PREFIX = 'inst';

interface Sent {
  code: string;
  key: string;
  url: string;
  data: Buffer;
}

const summary = (stdout: string): string => stdout.trim().split('\n').at(-1)!;

describe('sluice storage migrate into radosgw', { skip, timeout: 120_000 }, () => {
  let ceph: Ceph;
  let disk: TestServer;
  let cloud: TestServer | undefined;
  let to: string;
  const sent: Sent[] = [];
  let expiredKey = '';
  /** The SDK's variables without STORAGE_URL: the disk server's environment plus a way to the bucket. */
  let access: Record<string, string>;
  const migrate = (args: string[], extra: Record<string, string> = {}) => runCli(['storage', 'migrate', '--to', to, ...args], { ...disk.env, ...access, ...extra });

  const send = async (files: Array<{ name: string; data: Buffer }>): Promise<Sent[]> => {
    const up: Json = await uploaded(disk, files);
    const rows = await disk.sql<{ id: number; storage_key: string }[]>`
      select f.id, f.storage_key from files f join bundles b on b.id = f.bundle_id where b.short_code = ${up.short_code} order by f.seq`;
    const out = rows.map((r, i) => ({ code: up.short_code, key: r.storage_key, url: up.files[i].download_url, data: files[i]!.data }));
    sent.push(...out);
    return out;
  };
  const objectKeys = async (): Promise<string[]> => {
    const c = ceph.client();
    try {
      const r = await c.send(new ListObjectsV2Command({ Bucket: ceph.bucket, Prefix: `${PREFIX}/files/` }));
      return (r.Contents ?? []).map((o) => o.Key!.slice(`${PREFIX}/files/`.length)).sort();
    } finally {
      c.destroy();
    }
  };
  const verifiedKeys = async (): Promise<string[]> =>
    (await disk.sql<{ storage_key: string }[]>`select storage_key from storage_copies where target = ${`s3://${ceph.bucket}/${PREFIX} at ${ceph.endpoint}`} order by 1`).map((r) => r.storage_key);

  before(async () => {
    ceph = await startCeph();
    process.env.SLUICE_TEST_CEPH = JSON.stringify({
      endpoint: ceph.endpoint, region: ceph.region, accessKeyId: ceph.accessKeyId, secretAccessKey: ceph.secretAccessKey, bucket: ceph.bucket,
    });
    const { STORAGE_URL, ...rest } = ceph.env(PREFIX);
    to = STORAGE_URL!;
    access = rest;
    disk = await startServer('postgres');
    await send([{ name: 'a.txt', data: Buffer.from('hello\n') }, { name: 'empty.bin', data: Buffer.alloc(0) }]);
    await send([{ name: 'big.bin', data: randomBytes(20 * MIB) }]);
    await send(['c1', 'c2', 'c3'].map((n) => ({ name: n, data: randomBytes(3000) })));
    const gone = await send([{ name: 'old.bin', data: randomBytes(500) }]);
    await disk.sql`update bundles set expires_at = now() - interval '1 hour' where short_code = ${gone[0]!.code}`;
    expiredKey = gone[0]!.key;
    sent.pop();
  });
  after(async () => {
    await cloud?.close();
    await disk?.close();
    await ceph?.stop();
  });

  test('refusals: usage, a bad --to or --jobs, a missing bucket, a DATA_DIR without files; one line on stderr each', async () => {
    const cases: Array<[string[], Record<string, string>, RegExp]> = [
      [['storage', 'copy'], {}, /^sluice: usage: sluice storage migrate --to s3:\/\/BUCKET/],
      [['storage', 'migrate'], {}, /^sluice: usage: sluice storage migrate --to/],
      [['storage', 'migrate', '--to', 'https://x'], {}, /^sluice: --to: expected s3:\/\/BUCKET or s3:\/\/BUCKET\/PREFIX$/],
      [['storage', 'migrate', '--to', to, '--jobs', '0'], {}, /^sluice: invalid --jobs: 0 \(expected 1 to 64\)$/],
      [['storage', 'migrate', '--to', 's3://no-such-bucket'], {}, /^sluice: --to: bucket s3:\/\/no-such-bucket at http:\/\/127\.0\.0\.1:\d+ does not exist; create it first$/],
      [['storage', 'migrate', '--to', to], { DATA_DIR: path.join(disk.dataDir, 'nowhere') }, /^sluice: no files on disk at .*nowhere\/files: run with the disk installation's DATA_DIR$/],
    ];
    for (const [args, extra, want] of cases) {
      const r = await runCli(args, { ...disk.env, ...access, ...extra });
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}`);
      assert.match(r.stderr.trim(), want);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    }
    assert.deepEqual(await objectKeys(), []);
  });

  test('--dry-run lists the files of live bundles and touches nothing', async () => {
    const r = await migrate(['--dry-run']);
    assert.equal(r.code, 0, r.stderr);
    const listed = r.stdout.split('\n').filter((l) => l.startsWith('would copy ') && l.includes('bytes)') && !l.includes(' skipped '));
    assert.deepEqual(listed.map((l) => l.split(' ')[2]).sort(), sent.map((s) => s.key).sort());
    assert.equal(summary(r.stdout), `would copy 6 (${20 * MIB + 6 + 9000} bytes), skipped 0 already verified, 1 of expired bundles left out`);
    assert.deepEqual(await objectKeys(), []);
  });

  test('killed -9 midway, a re-run finishes the rest and skips what was verified', async () => {
    const proc = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'storage', 'migrate', '--to', to, '--jobs', '1'], {
      cwd: ROOT, env: { ...disk.env, ...access },
    });
    let out = '';
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    await new Promise<void>((resolve, reject) => {
      proc.stdout.on('data', (c) => {
        out += c;
        if (/^copied /m.test(out)) resolve();
      });
      proc.once('exit', () => reject(new Error(`exited before copying anything:\n${out}`)));
    });
    proc.kill('SIGKILL');
    await exited;
    const early = await verifiedKeys();
    assert.ok(early.length >= 1 && early.length < sent.length, `killed midway: ${early.length} of ${sent.length} verified`);

    const r = await migrate([]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const m = /^copied (\d+) \(\d+ bytes\), skipped (\d+) already verified, failed 0, 1 of expired bundles left out$/.exec(summary(r.stdout));
    assert.ok(m, r.stdout);
    assert.equal(Number(m[2]), early.length);
    assert.equal(Number(m[1]) + Number(m[2]), sent.length);
    for (const k of early) assert.doesNotMatch(r.stdout, new RegExp(`^copied ${k}`, 'm'), 'a verified file is not copied again');
    const keys = sent.map((s) => s.key).sort();
    assert.deepEqual(await verifiedKeys(), keys);
    assert.deepEqual(await objectKeys(), keys, 'every live file in the bucket, the expired one left out');
    assert.ok(!keys.includes(expiredKey));
    // The 20 MiB file went up as a multipart upload (its ETag names the part count).
    const big = sent.find((s) => s.data.length === 20 * MIB)!;
    const c = ceph.client();
    try {
      const head = await c.send(new HeadObjectCommand({ Bucket: ceph.bucket, Key: `${PREFIX}/files/${big.key}` }));
      assert.equal(head.ContentLength, 20 * MIB);
      assert.match(head.ETag ?? '', /-\d+"?$/, `multipart ETag: ${head.ETag}`);
    } finally {
      c.destroy();
    }
  });

  test('Ctrl-C stops the copy in flight, removes its multipart upload and prints the summary; a re-run copies it', async () => {
    const [big] = await send([{ name: 'big2.bin', data: randomBytes(24 * MIB) }]);
    const proc = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'storage', 'migrate', '--to', to], { cwd: ROOT, env: { ...disk.env, ...access } });
    let out = '';
    let err = '';
    proc.stdout.on('data', (c) => (out += c));
    proc.stderr.on('data', (c) => (err += c));
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    const c = ceph.client();
    try {
      const uploads = async () => (await c.send(new ListMultipartUploadsCommand({ Bucket: ceph.bucket, Prefix: `${PREFIX}/files/` }))).Uploads ?? [];
      let seen = false;
      for (let i = 0; i < 500 && !seen && proc.exitCode === null; i++) {
        seen = (await uploads()).some((u) => u.Key === `${PREFIX}/files/${big!.key}`);
        if (!seen) await new Promise((r) => setTimeout(r, 10));
      }
      assert.ok(seen, `the multipart upload was seen in flight: ${out}`);
      proc.kill('SIGINT');
      assert.equal(await exited, 1);
      assert.match(summary(out), /^copied 0 \(0 bytes\), skipped \d+ already verified, failed 0/);
      assert.equal(err.trim(), 'sluice: storage migrate: interrupted; run it again to copy the rest');
      assert.deepEqual((await uploads()).map((u) => u.Key), [], 'no multipart upload left behind');
      assert.ok(!(await objectKeys()).includes(big!.key));
    } finally {
      c.destroy();
    }
    const r = await migrate([]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(summary(r.stdout), new RegExp(`^copied 1 \\(${24 * MIB} bytes\\), skipped ${sent.length - 1} already verified, failed 0`));
  });

  test('a second run copies only the files uploaded since', async () => {
    const before = sent.length;
    const [fresh] = await send([{ name: 'new.bin', data: randomBytes(7777) }]);
    const r = await migrate([]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.stdout.split('\n').filter((l) => l.startsWith('copied ') && !l.includes('skipped')).map((l) => l.split(' ')[1]), [fresh!.key]);
    assert.equal(summary(r.stdout), `copied 1 (7777 bytes), skipped ${before} already verified, failed 0, 1 of expired bundles left out`);
  });

  test('a sweep forgets the record of a verified copy whose file was deleted since', async () => {
    const [gone] = await send([{ name: 'deleted.bin', data: randomBytes(1234) }]);
    sent.pop();
    assert.equal((await migrate([])).code, 0);
    assert.ok((await verifiedKeys()).includes(gone!.key));
    await disk.sql`delete from bundles where short_code = ${gone!.code}`;
    // The expired bundle the other tests count is kept out of this sweep's reach meanwhile.
    const setExpiry = (at: Date): Promise<unknown> =>
      disk.sql`update bundles b set expires_at = ${at} from files f where f.bundle_id = b.id and f.storage_key = ${expiredKey}`;
    await setExpiry(new Date(Date.now() + 3_600_000));
    const r = await disk.cli(['sweep']).finally(() => setExpiry(new Date(Date.now() - 3_600_000)));
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /expired bundles: 0,.*records of migrated copies: 1,/);
    assert.ok(!(await verifiedKeys()).includes(gone!.key));
  });

  test('a file changed or gone on disk is refused loudly (SHA-256 when recorded, else CRC-32), exit 1; fixed, a re-run copies it', async () => {
    const files = await send([
      { name: 'bad-sha.bin', data: randomBytes(4096) },
      { name: 'fine.bin', data: randomBytes(4096) },
      { name: 'bad-crc.bin', data: randomBytes(4096) },
      { name: 'lost.bin', data: randomBytes(4096) },
    ]);
    const [badSha, fine, badCrc, lost] = files as [Sent, Sent, Sent, Sent];
    // A row of an earlier release, which recorded the SHA-256.
    await disk.sql`update files set sha256 = ${createHash('sha256').update(badSha.data).digest()} where storage_key = ${badSha.key}`;
    const layout = diskLayout(disk.dataDir);
    for (const f of [badSha, badCrc]) {
      const changed = Buffer.from(f.data);
      changed.writeUInt8(changed.readUInt8(100) ^ 0xff, 100);
      fs.writeFileSync(layout.filePath(f.key), changed);
    }
    fs.rmSync(layout.filePath(lost.key));
    const r = await migrate([]);
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stdout, new RegExp(`^FAILED ${badSha.key} \\(${badSha.code}, 4096 bytes\\): corrupt on disk: SHA-256 [0-9a-f]{64} differs from the recorded ${createHash('sha256').update(badSha.data).digest('hex')}; nothing copied$`, 'm'));
    assert.match(r.stdout, new RegExp(`^FAILED ${badCrc.key} .*: corrupt on disk: CRC-32 [0-9a-f]{8} differs from the recorded [0-9a-f]{8}; nothing copied$`, 'm'));
    assert.match(r.stdout, new RegExp(`^FAILED ${lost.key} .*: missing on disk, and not in the bucket$`, 'm'));
    assert.match(r.stdout, new RegExp(`^copied ${fine.key} `, 'm'));
    assert.match(summary(r.stdout), /^copied 1 \(4096 bytes\), skipped \d+ already verified, failed 3, /);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^sluice: storage migrate: 3 file\(s\) failed/);
    const inBucket = await objectKeys();
    assert.ok(!inBucket.includes(badSha.key) && !inBucket.includes(badCrc.key), 'nothing of a corrupt file reaches the bucket');

    for (const f of [badSha, badCrc, lost]) fs.writeFileSync(layout.filePath(f.key), f.data);
    const again = await migrate([]);
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.match(summary(again.stdout), /^copied 3 \(12288 bytes\), /);
  });

  test('the switch: stop, a last run with STORAGE_URL set, start on the bucket; every file comes back byte for byte', async () => {
    await disk.stop();
    const wrong = await migrate([], { STORAGE_URL: `s3://${ceph.bucket}/elsewhere` });
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /^sluice: STORAGE_URL names s3:\/\/sluice-test\/elsewhere at .* but --to names s3:\/\/sluice-test\/inst at .*; they must be the same bucket\n$/);
    const last = await migrate([], { STORAGE_URL: to });
    assert.equal(last.code, 0, last.stderr);
    assert.equal(summary(last.stdout), `copied 0 (0 bytes), skipped ${sent.length} already verified, failed 0, 1 of expired bundles left out`);

    const srv = await startServer('s3', { DATABASE_URL: disk.env.DATABASE_URL!, ...ceph.env(PREFIX) });
    cloud = srv;
    for (const s of sent) {
      const res = await fetch(`${srv.url}${s.url}`);
      assert.equal(res.status, 200, `${s.key}: ${res.status}`);
      assert.ok(Buffer.from(await res.arrayBuffer()).equals(s.data), `${s.key} byte-identical`);
    }
    // A run after the switch finds the new uploads in the bucket only, and checks them there.
    const up: Json = await uploaded(srv, [{ name: 'after.bin', data: randomBytes(999) }]);
    const [later] = await srv.sql<{ storage_key: string }[]>`
      select f.storage_key from files f join bundles b on b.id = f.bundle_id where b.short_code = ${up.short_code}`;
    const again = await migrate([], { STORAGE_URL: to });
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.match(again.stdout, new RegExp(`^verified in the bucket \\(not on disk\\) ${later!.storage_key} `, 'm'));
    assert.match(summary(again.stdout), /^copied 0 \(0 bytes\), skipped \d+ already verified, failed 0, 1 found in the bucket only/);
  });

  test('the start banner names the bucket when STORAGE_URL is set', () => {
    const config = loadConfig({ ...ceph.env(PREFIX), DATA_DIR: '/srv/sluice' });
    assert.equal(modeLine(config), `database: embedded (/srv/sluice/postgres) · state: in-process · storage: S3 (s3://${ceph.bucket}/${PREFIX} at ${ceph.endpoint})`);
    assert.match(modeLine(loadConfig({ DATA_DIR: '/srv/sluice' })), /storage: disk \(\/srv\/sluice\/files\)$/);
  });
});
