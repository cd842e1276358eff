/**
 * Three stateless nodes (each its own DATA_DIR, one SECRET, one PostgreSQL database, Redis and a
 * Ceph bucket) behind HAProxy round robin: any node serves what another stored, a tus upload moves
 * between nodes and survives one being killed mid-PATCH, the anonymous budget is one budget, and
 * killing every node mid-upload leaves nothing a sweep does not remove.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ListMultipartUploadsCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';
import { createPgDatabase, dropPgDatabase } from './helpers/database.ts';
import { prerequisite } from './helpers/prereq.ts';
import { startServer, type TestServer } from './helpers/server.ts';
import { call, upload } from './helpers/http.ts';
import { tusCall, tusMeta, uploadLocked, uploadPath } from './helpers/tus.ts';
import { waitFor } from './helpers/wait.ts';
import { loadConfig } from '../src/config.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { sweep } from '../src/sweeper/sweep.ts';
import postgres from 'postgres';

const MIB = 1024 * 1024;
const skip = cephSkip('three nodes behind HAProxy (test/multi-node.test.ts)') ||
  prerequisite({ what: 'three nodes behind HAProxy (test/multi-node.test.ts)', missing: fs.existsSync('/usr/sbin/haproxy') ? false : 'haproxy is not installed', install: 'apt-get install -y haproxy' });
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().once('error', reject).listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

describe('three nodes behind HAProxy', { skip }, () => {
  let ceph: Ceph;
  let pg: { name: string; url: string };
  let env: Record<string, string>;
  const nodes: TestServer[] = [];
  let haproxy: ChildProcess;
  let lbPort = 0;
  let dir = '';
  const lb = { get url() { return `http://127.0.0.1:${lbPort}`; } } as TestServer;

  const writeConfig = (): string => {
    const cfg = path.join(dir, 'haproxy.cfg');
    fs.writeFileSync(cfg, [
      'defaults', '  mode http', '  timeout connect 2s', '  timeout client 60s', '  timeout server 60s', '  retries 2', '  option redispatch',
      'frontend f', `  bind 127.0.0.1:${lbPort}`, '  default_backend nodes',
      'backend nodes', '  balance roundrobin',
      ...nodes.map((n, i) => `  server n${i} 127.0.0.1:${n.port} check inter 500 fall 1 rise 1`), '',
    ].join('\n'));
    return cfg;
  };

  before(async () => {
    ceph = await startCeph();
    process.env.SLUICE_TEST_CEPH = JSON.stringify({
      endpoint: ceph.endpoint, region: ceph.region, accessKeyId: ceph.accessKeyId, secretAccessKey: ceph.secretAccessKey, bucket: ceph.bucket,
    });
    pg = await createPgDatabase();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-lb-'));
    env = {
      ...ceph.env('cluster'),
      DATABASE_URL: pg.url,
      REDIS_URL: process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379',
      SECRET: randomBytes(32).toString('hex'),
      RATE_LIMIT_ANON_PER_HOUR: '1000000',
    };
    for (let i = 0; i < 3; i++) nodes.push(await startServer('s3', env));
    lbPort = await freePort();
    haproxy = spawn('haproxy', ['-db', '-f', writeConfig()], { stdio: ['ignore', 'ignore', 'pipe'] });
    await waitFor('HAProxy to answer', async () => (await fetch(`${lb.url}/healthz`)).status === 200, 10_000);
  });
  after(async () => {
    haproxy?.kill('SIGKILL');
    for (const n of nodes) await n.close();
    if (pg) await dropPgDatabase(pg.name);
    await ceph?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('an upload through one node is downloaded, zipped and deleted through the others', async () => {
    const data = randomBytes(9 * MIB);
    const r = await upload(nodes[0]!, [{ name: 'a.bin', data }, { name: 'b.txt', data: 'hello' }]);
    assert.equal(r.status, 201, r.text);
    const file = r.json.files[0];
    const got = Buffer.from(await (await fetch(`${nodes[1]!.url}${file.download_url}`)).arrayBuffer());
    assert.equal(sha(got), sha(data), 'node 1 serves the bytes node 0 stored');
    const zip = await fetch(`${nodes[2]!.url}/zip/${r.json.short_code}`);
    assert.equal(zip.status, 200);
    assert.ok((await zip.arrayBuffer()).byteLength > data.length, 'node 2 zips them');
    const del = await call(nodes[2]!, 'DELETE', `/api/v1/bundle/${r.json.short_code}`, { headers: { 'x-upload-token': r.json.upload_token } });
    assert.ok(del.status === 200 || del.status === 204, del.text);
    await waitFor('the deletion to reach node 1', async () => (await fetch(`${nodes[1]!.url}${file.download_url}`)).status === 404);
  });

  test('a tus upload whose PATCHes alternate between nodes survives a node killed -9 mid-PATCH', { timeout: 60_000 }, async () => {
    const data = randomBytes(20 * MIB);
    const created = await tusCall(lb, 'POST', '/api/v1/tus/', { 'upload-length': String(data.length), 'upload-metadata': tusMeta({ filename: 'big.bin' }) });
    assert.equal(created.status, 201, created.body);
    const loc = uploadPath(created.headers.location!);
    let offset = 0;
    const step = 6 * MIB;
    for (const n of [nodes[0]!, nodes[1]!]) {
      const r = await tusCall(n, 'PATCH', loc, { 'content-type': 'application/offset+octet-stream', 'upload-offset': String(offset) }, data.subarray(offset, offset + step));
      assert.equal(r.status, 204, r.body);
      offset = Number(r.headers['upload-offset']);
    }
    // Node 2 takes the next PATCH and dies with half of it read.
    const victim = nodes[2]!;
    const sock = net.connect(victim.port, '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    sock.write(`PATCH ${loc} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: ${offset}\r\n` +
      `Content-Type: application/offset+octet-stream\r\nContent-Length: ${data.length - offset}\r\n\r\n`);
    sock.write(data.subarray(offset, offset + 3 * MIB));
    sock.on('error', () => {}); // reset when the node dies
    const id = path.basename(loc);
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    try {
      await waitFor('node 2 to hold the upload', () => uploadLocked(sql as never, id));
      await victim.kill();
      sock.destroy();
      // The lock went with the dead node's database session: the others continue within seconds.
      await waitFor('the dead node\'s lock to go', async () => !(await uploadLocked(sql as never, id)), 10_000);
    } finally {
      await sql.end();
    }
    const head = async (n: TestServer) => tusCall(n, 'HEAD', loc);
    offset = Number((await head(nodes[0]!)).headers['upload-offset']);
    for (let turn = 0; offset < data.length; turn++) {
      const r = await tusCall(nodes[turn % 2]!, 'PATCH', loc, { 'content-type': 'application/offset+octet-stream', 'upload-offset': String(offset) }, data.subarray(offset, offset + step));
      assert.equal(r.status, 204, r.body);
      offset = Number(r.headers['upload-offset']);
    }
    const done = await head(nodes[1]!);
    assert.equal(done.headers['upload-offset'], String(data.length));
    const got = Buffer.from(await (await fetch(`${nodes[0]!.url}${loc}`)).arrayBuffer());
    assert.equal(sha(got), sha(data), 'byte-identical');
    await victim.restart();
  });

  test('the anonymous budget is one budget across nodes', async () => {
    // Two nodes of their own with a budget of 4 requests an hour, sharing a fresh database (whose
    // instance id names the Redis keys, so the budget starts full).
    const fresh = await createPgDatabase();
    const small: TestServer[] = [];
    for (let i = 0; i < 2; i++) small.push(await startServer('s3', { ...env, DATABASE_URL: fresh.url, STORAGE_URL: `${env.STORAGE_URL}-budget`, RATE_LIMIT_ANON_PER_HOUR: '4' }));
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) statuses.push((await upload(small[i % 2]!, [{ name: `f${i}`, data: 'x' }])).status);
      assert.deepEqual(statuses.filter((s) => s === 201).length, 4, JSON.stringify(statuses));
      assert.ok(statuses.slice(4).every((s) => s === 429), JSON.stringify(statuses));
    } finally {
      for (const n of small) await n.close();
      await dropPgDatabase(fresh.name);
    }
  });

  test('a frozen object store (radosgw SIGSTOPped): store calls end at their deadline as UNAVAILABLE; a download gets 503 with Retry-After', { timeout: 90_000 }, async () => {
    const data = randomBytes(100_000);
    const up = await upload(nodes[0]!, [{ name: 'frozen.bin', data }]);
    assert.equal(up.status, 201, up.text);
    const fileId = up.json.files[0].id as number;
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    const key = (await sql<{ k: string }[]>`select storage_key as k from files where id = ${fileId}`)[0]!.k;
    await sql.end();
    const location = loadConfig(env).s3!;
    // The same store with a 2 s deadline instead of 30 s, so that each call's bound shows quickly.
    const store = await createS3Store({ location, tmpDir: dir, deadlineMs: 2000, check: false });
    const unavailable = (e: unknown): boolean => (e as { code?: string }).code === 'UNAVAILABLE';
    ceph.pauseRgw(true);
    try {
      for (const [what, call] of [
        ['read', () => store.read(key)],
        ['open', () => store.open(key)],
        ['write', async () => {
          const w = store.createWriter();
          w.write(Buffer.from(data));
          await w.finish();
          await w.publish();
        }],
      ] as const) {
        const t0 = Date.now();
        await assert.rejects(call(), unavailable, what);
        const took = Date.now() - t0;
        assert.ok(took < 2000 + 3000, `${what} ended after ${took} ms with a 2 s deadline`);
      }
      // Through a node, with the server's own deadline (30 s): an answer, not a hang.
      const t0 = Date.now();
      const r = await fetch(`${nodes[1]!.url}/d/${fileId}`, { signal: AbortSignal.timeout(60_000) });
      const took = Date.now() - t0;
      assert.equal(r.status, 503, await r.text());
      assert.equal(r.headers.get('retry-after'), '5');
      assert.ok(took < 40_000, `answered after ${took} ms`);
    } finally {
      ceph.pauseRgw(false);
      await store.close();
    }
    const back = await fetch(`${nodes[1]!.url}/d/${fileId}`);
    assert.equal(back.status, 200);
    assert.deepEqual(Buffer.from(await back.arrayBuffer()), data);
  });

  test('kill -9 of every node during 8 concurrent uploads, then a sweep: no incomplete upload, no orphan object', { timeout: 240_000 }, async () => {
    const socks: net.Socket[] = [];
    for (let i = 0; i < 8; i++) {
      const n = nodes[i % 3]!;
      const sock = net.connect(n.port, '127.0.0.1');
      sock.on('error', () => {});
      await new Promise((r) => sock.once('connect', r));
      const b = `----x${i}`;
      const size = 40 * MIB;
      const head = `--${b}\r\nContent-Disposition: form-data; name="files[]"; filename="f${i}.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`;
      const total = head.length + size + `\r\n--${b}--\r\n`.length;
      sock.write(`POST /api/v1/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=${b}\r\nContent-Length: ${total}\r\n\r\n${head}`);
      sock.write(randomBytes(14 * MIB));
      socks.push(sock);
    }
    const s3 = ceph.client();
    const incomplete = async () =>
      ((await s3.send(new ListMultipartUploadsCommand({ Bucket: ceph.bucket, Prefix: 'cluster/files/' }))).Uploads ?? []).length;
    await waitFor('multipart uploads in flight', async () => (await incomplete()) >= 8, 60_000);
    for (const n of nodes) await n.kill();
    for (const s of socks) s.destroy();
    assert.ok((await incomplete()) >= 8, 'the crash left multipart uploads behind');
    // The sweep every node runs, here with no idle grace (a crash is old news at once).
    const sql = postgres(pg.url, { max: 2, onnotice: () => {} });
    const store = await createS3Store({ location: loadConfig(env).s3!, tmpDir: dir });
    try {
      await sweep(sql, store, { partIdleMs: 0, orphanGraceMs: 0 });
    } finally {
      await store.close();
      await sql.end();
    }
    assert.equal(await incomplete(), 0, 'no incomplete multipart upload');
    const keys = await sql2Keys(pg.url);
    const objects = ((await s3.send(new ListObjectsV2Command({ Bucket: ceph.bucket, Prefix: 'cluster/files/' }))).Contents ?? [])
      .map((o) => o.Key!.slice('cluster/files/'.length));
    assert.deepEqual(objects.sort(), keys.sort(), 'every object is a committed file: no orphan');
    s3.destroy();
    for (const n of nodes) await n.restart();
  });
});

async function sql2Keys(url: string): Promise<string[]> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    return (await sql<{ storage_key: string }[]>`select storage_key from files`).map((r) => r.storage_key);
  } finally {
    await sql.end();
  }
}
