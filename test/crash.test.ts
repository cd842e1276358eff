import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'undici';
import postgres from 'postgres';
import { backends, startServer, storedBlobs, storedPaths, type TestServer } from './helpers/server.ts';
import { waitFor } from './helpers/wait.ts';
import { uploaded } from './helpers/http.ts';
import { loadConfig } from '../src/config.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { sweep } from '../src/sweeper/sweep.ts';

const MiB = 1024 * 1024;
const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');


async function download(srv: TestServer, url: string): Promise<{ status: number; body: Buffer }> {
  const res = await request(`${srv.url}${url}`);
  return { status: res.statusCode, body: Buffer.from(await res.body.arrayBuffer()) };
}

/**
 * A raw multipart upload of `fileBytes` over node:net, written in 256 KiB pieces with
 * backpressure. After `holdAt` bytes of file data it stops writing and waits for `release`, so
 * the request is certainly still streaming when the server dies. Socket errors are expected.
 */
function rawUpload(port: number, fileBytes: number, holdAt: number, release: Promise<void>): { sent: () => number; done: Promise<void> } {
  const boundary = `----crash${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="files[]"; filename="big.bin"\r\n` +
      `Content-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const piece = randomBytes(256 * 1024);
  let sent = 0;
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  const write = (b: Buffer): Promise<void> =>
    new Promise((resolve, reject) => {
      if (socket.destroyed) return reject(new Error('socket closed'));
      if (socket.write(b)) return resolve();
      const onDrain = (): void => (socket.off('close', onClose), resolve());
      const onClose = (): void => (socket.off('drain', onDrain), reject(new Error('socket closed')));
      socket.once('drain', onDrain);
      socket.once('close', onClose);
    });
  const done = (async () => {
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    await write(
      Buffer.from(
        `POST /api/v1/upload HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
          `Content-Type: multipart/form-data; boundary=${boundary}\r\n` +
          `Content-Length: ${head.length + fileBytes + tail.length}\r\n\r\n`,
      ),
    );
    await write(head);
    while (sent < holdAt) {
      const n = Math.min(piece.length, holdAt - sent);
      await write(piece.subarray(0, n));
      sent += n;
    }
    await release;
  })()
    .catch(() => {})
    .finally(() => socket.destroy());
  return { sent: () => sent, done };
}


const partSizes = (dataDir: string): number[] =>
  storedPaths(dataDir).parts.map((p) => fs.statSync(path.join(dataDir, 'tmp', p), { throwIfNoEntry: false })?.size ?? 0);

/**
 * Whether three uploads have bytes in the store: temp files with bytes on disk; in a bucket,
 * multipart uploads (one starts when a writer cuts its first part).
 */
async function threeStreaming(srv: TestServer): Promise<boolean> {
  if (srv.backend !== 's3') {
    const sizes = partSizes(srv.dataDir);
    return sizes.length >= 3 && sizes.every((s) => s > 0);
  }
  return (await storedBlobs(srv)).parts.length >= 3;
}

/** The sweep the server runs, here with no idle grace: the process that owned the leftovers is dead. */
async function sweepNow(srv: TestServer): Promise<void> {
  const sql = postgres(srv.env.DATABASE_URL!, { max: 2, onnotice: () => {} });
  const store = await createS3Store({ location: loadConfig(srv.env).s3!, tmpDir: srv.dataDir, check: false });
  try {
    await sweep(sql, store, { partIdleMs: 0 });
  } finally {
    await store.close();
    await sql.end();
  }
}

for (const backend of backends()) {
  describe(`crash during uploads (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    test('SIGKILL mid-stream loses nothing committed and leaves no partial state after restart', async () => {
      // Committed before the crash: three files in two bundles, one spanning several write slots.
      const originals = [
        { name: 'a.txt', data: Buffer.from('committed before the crash') },
        { name: 'b.bin', data: randomBytes(2 * MiB + 17) },
        { name: 'c.bin', data: randomBytes(1000) },
      ];
      const ups = [await uploaded(srv, originals.slice(0, 2)), await uploaded(srv, originals.slice(2))];
      const committed = ups.flatMap((u) => u.files).map((f, i) => ({ ...f, sha: sha256(originals[i]!.data) }));
      assert.equal(committed.length, 3);
      const [before] = await srv.sql<{ n: string }[]>`select count(*) as n from bundles`;
      assert.equal(Number(before!.n), 2);

      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      const streams = [0, 1, 2].map(() => rawUpload(srv.port, 32 * MiB, 8 * MiB, released));
      try {
        await waitFor('three uploads with bytes in the store', () => threeStreaming(srv), 30_000);
        await srv.kill();
      } finally {
        release();
        await Promise.all(streams.map((s) => s.done));
      }
      assert.ok(streams.every((s) => s.sent() < 32 * MiB), 'no upload was complete when the server died');
      const left = (await storedBlobs(srv)).parts;
      assert.ok(left.length >= 3, `the crash left parts behind: ${left.join(', ')}`);
      if (srv.backend === 's3') assert.ok(left.every((p) => p.includes('#')), `incomplete multipart uploads: ${left.join(', ')}`);

      await srv.restart();

      if (srv.backend === 's3') {
        // Another node's live upload looks the same in the bucket: only an idle one is reclaimed.
        assert.deepEqual((await storedBlobs(srv)).parts, left, 'the start-up sweep leaves uploads not yet idle');
        await sweepNow(srv);
      }
      assert.deepEqual((await storedBlobs(srv)).parts, [], 'the sweep reclaimed the dead process parts');
      const [bundles] = await srv.sql<{ n: string }[]>`select count(*) as n from bundles`;
      const [files] = await srv.sql<{ n: string }[]>`select count(*) as n from files`;
      assert.equal(Number(bundles!.n), 2, 'no bundle rows beyond the committed ones');
      assert.equal(Number(files!.n), 3, 'no file rows beyond the committed ones');
      assert.equal((await storedBlobs(srv)).files.length, 3, 'no stored files beyond the committed ones');

      for (const f of committed) {
        const r = await download(srv, f.download_url);
        assert.equal(r.status, 200, f.name);
        assert.equal(sha256(r.body), f.sha, `${f.name} byte-identical after the crash`);
      }
      for (const u of ups) {
        const info = await request(`${srv.url}/api/v1/bundle/${u.short_code}`);
        assert.equal(info.statusCode, 200);
        await info.body.arrayBuffer();
      }

      const fresh = randomBytes(3 * MiB);
      const up = await uploaded(srv, [{ name: 'after.bin', data: fresh }]);
      const r = await download(srv, up.files[0]!.download_url);
      assert.equal(r.status, 200);
      assert.equal(sha256(r.body), sha256(fresh));
    });
  });
}
