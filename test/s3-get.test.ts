import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { S3Client } from '@aws-sdk/client-s3';
import { loadConfig } from '../src/config.ts';
import { type BlobStore } from '../src/storage/blob-store.ts';
import { isBlobError } from '../src/errors.ts';
import { SOCKET_GET_MIN_BYTES } from '../src/storage/s3/read.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';
import { spawnReadyChild } from './helpers/storage-contract.ts';

const skip = cephSkip('large reads over their own connection, on Ceph radosgw (test/s3-get.test.ts)');
const MIB = 1024 * 1024;

/**
 * A proxy in front of radosgw that plays a misbehaving store or network: `onResponse` may change
 * what a GET answers (returning true when it answered), and `forwarded` counts the body bytes it passed on.
 */
interface Proxy {
  endpoint: string;
  forwarded: number;
  onResponse: ((res: http.ServerResponse, up: http.IncomingMessage) => boolean) | null;
  close(): void;
}

async function startProxy(ceph: Ceph, opts: { tls?: { key: string; cert: string } } = {}): Promise<Proxy> {
  const target = new URL(ceph.endpoint);
  const p: Proxy = { endpoint: '', forwarded: 0, onResponse: null, close: () => server.close() };
  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      if (req.method === 'GET' && p.onResponse?.(res, r)) return;
      res.writeHead(r.statusCode!, r.headers);
      r.on('data', (c: Buffer) => (p.forwarded += c.length));
      r.pipe(res);
    });
    req.pipe(up);
  };
  const server = opts.tls ? https.createServer(opts.tls, handler) : http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  p.endpoint = `${opts.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  return p;
}

describe('large reads over their own connection (radosgw)', { skip }, () => {
  let ceph: Ceph;
  let s3: S3Client;
  let store: BlobStore;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-s3get-'));
  const data = randomBytes(10 * SOCKET_GET_MIN_BYTES + 12345);
  let key: string;

  before(async () => {
    ceph = await startCeph();
    s3 = ceph.client();
    store = await createS3Store({ location: loadConfig(ceph.env('g')).s3!, tmpDir: tmp });
    const w = store.createWriter();
    for (let at = 0; at < data.length; at += MIB) {
      if (!w.write(data.subarray(at, at + MIB), true)) await new Promise<void>((r) => w.onDrain(r));
    }
    await w.finish();
    await w.publish();
    key = w.key;
  });
  after(async () => {
    await store?.close();
    s3?.destroy();
    await ceph?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const viaProxy = async (proxy: Proxy) =>
    createS3Store({ location: loadConfig({ ...ceph.env('g'), AWS_ENDPOINT_URL_S3: proxy.endpoint }).s3!, tmpDir: tmp, check: false });

  test('a reader stops the store while its client does not read: what is in flight is what the socket buffers hold', async () => {
    const proxy = await startProxy(ceph);
    const via = await viaProxy(proxy);
    try {
      const r = await via.open(key);
      const buf = Buffer.alloc(MIB);
      await r.readInto(buf, 0);
      // Wait until the proxy has passed on all it can: until nothing moved for 300 ms.
      let held = -1;
      for (let i = 0; i < 30 && proxy.forwarded !== held; i++) {
        held = proxy.forwarded;
        await new Promise((res) => setTimeout(res, 300));
      }
      assert.equal(proxy.forwarded, held, 'the transfer stopped while no read was asked for');
      assert.ok(held < 24 * MIB, `the store sent ${held} of ${data.length} bytes for one 1 MiB read`);
      for (let at = MIB; at < data.length; at += MIB) {
        const part = buf.subarray(0, Math.min(MIB, data.length - at));
        await r.readInto(part, at);
        assert.ok(part.equals(data.subarray(at, at + part.length)), `bytes at ${at}`);
        await new Promise((res) => setTimeout(res, 2));
      }
      r.close();
    } finally {
      await via.close();
      proxy.close();
    }
  });

  test('a body cut short fails its read at once; the next read opens another GET', async () => {
    const proxy = await startProxy(ceph);
    let cuts = 1;
    proxy.onResponse = (res, up) => {
      if (cuts-- <= 0) return false;
      res.writeHead(up.statusCode!, up.headers);
      let sent = 0;
      up.on('data', (c: Buffer) => {
        if (sent > 2 * MIB) return void res.destroy();
        sent += c.length;
        res.write(c);
      });
      return true;
    };
    const via = await viaProxy(proxy);
    try {
      const r = await via.open(key);
      const buf = Buffer.alloc(4 * MIB);
      await assert.rejects(r.readInto(buf, 0), /closed the connection early|ECONNRESET|socket hang up/);
      await r.readInto(buf, 0);
      assert.ok(buf.equals(data.subarray(0, 4 * MIB)));
      r.close();
    } finally {
      await via.close();
      proxy.close();
    }
  });

  test('an object deleted after open is NOT_FOUND; radosgw stopped is UNAVAILABLE, and reads work once it is back', async () => {
    const w = store.createWriter();
    w.write(data.subarray(0, 2 * SOCKET_GET_MIN_BYTES), true);
    await w.finish();
    await w.publish();
    const gone = await store.open(w.key);
    await store.delete(w.key);
    await assert.rejects(gone.readInto(Buffer.alloc(MIB), 0), (err: unknown) => isBlobError(err, 'NOT_FOUND'));
    gone.close();

    const r = await store.open(key);
    await ceph.stopRgw();
    try {
      const started = Date.now();
      await assert.rejects(r.readInto(Buffer.alloc(MIB), 0), (err: unknown) => isBlobError(err, 'UNAVAILABLE'));
      assert.ok(Date.now() - started < 5000, 'refused connections are tried three times, briefly');
    } finally {
      await ceph.startRgw();
    }
    const buf = Buffer.alloc(MIB);
    await r.readInto(buf, 5 * MIB);
    assert.ok(buf.equals(data.subarray(5 * MIB, 6 * MIB)));
    r.close();
  });

  test('start-up: a store whose GETs a plain connection cannot read is a clear error', async () => {
    const proxy = await startProxy(ceph);
    // Chunked bodies where S3 sends a Content-Length: the SDK copes, a plain GET does not.
    proxy.onResponse = (res, up) => {
      const headers = { ...up.headers };
      delete headers['content-length'];
      res.writeHead(up.statusCode!, headers);
      up.pipe(res);
      return true;
    };
    const location = loadConfig({ ...ceph.env('g'), AWS_ENDPOINT_URL_S3: proxy.endpoint }).s3!;
    try {
      await assert.rejects(createS3Store({ location, tmpDir: tmp }), {
        name: 'StorageSetupError',
        message: /^STORAGE_URL: s3:\/\/sluice-test at .* answered the SDK but not the same GET sent over a plain connection \(.*chunked/,
      });
    } finally {
      proxy.close();
    }
  });

  test('over TLS: the start-up checks and an in-order read through an HTTPS endpoint', async () => {
    const keyFile = path.join(tmp, 'key.pem');
    const certFile = path.join(tmp, 'cert.pem');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '1',
      '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
    const proxy = await startProxy(ceph, { tls: { key: fs.readFileSync(keyFile, 'utf8'), cert: fs.readFileSync(certFile, 'utf8') } });
    try {
      const env = { ...process.env, ...ceph.env('g'), AWS_ENDPOINT_URL_S3: proxy.endpoint, NODE_EXTRA_CA_CERTS: certFile, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' };
      const { child, ready } = await spawnReadyChild('s3-read-child.ts', [key], env);
      child.kill();
      assert.equal(ready, createHash('sha256').update(data).digest('hex'));
      assert.ok(proxy.forwarded >= data.length, 'the bytes came through the HTTPS endpoint');
    } finally {
      proxy.close();
    }
  });
});
