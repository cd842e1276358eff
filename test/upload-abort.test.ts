import { describe, it, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { Readable } from 'node:stream';
import { backends, startServer, storedBlobs, type TestServer } from './helpers/server.ts';
import { MiB, created, ensureRunning, assertServes, assertNoServerErrors, snapshot, assertNothingKept, rawConnect, rawHead, partHead, closing, newBoundary, write, assertJsonError, survives, exited, sendUntilAnswered, repeated } from './upload-util.ts';
import { file, upload, call } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';
import { MAX_FORM_OVERHEAD } from '../src/ingest/multipart.ts';

/** Anonymous cap of this file's server: the aborted 8 MiB uploads below stay within it. */
const CAP = 8 * MiB;

/** The most a TCP socket buffer may grow to here (`net.ipv4.tcp_rmem` or `tcp_wmem`, third field). */
/**
 * What the uWS build for Node 22 and later may read of a body beyond the older build: it reads on
 * after a pause until a read comes up short (up to one more receive buffer), and what it read
 * meanwhile waits unparsed, so the cap is checked as bytes arrive against the cap plus the most a
 * form can add (src/http/body-flow.ts). Zero on Node 20 and 21.
 */
function readWhilePaused(): number {
  return Number(process.versions.modules) >= 127 ? tcpBufferMax('tcp_rmem') + MAX_FORM_OVERHEAD : 0;
}

function tcpBufferMax(name: 'tcp_rmem' | 'tcp_wmem'): number {
  try {
    return Number(fs.readFileSync(`/proc/sys/net/ipv4/${name}`, 'utf8').trim().split(/\s+/)[2]) || 8 * MiB;
  } catch {
    return 8 * MiB;
  }
}
const PIECE = 256 * 1024;

/** Waits for the temp parts of an aborted request to go (or for the server to die: assertServes says so). */
async function partsGone(srv: TestServer): Promise<void> {
  await waitFor('the temp parts to be removed', async () => (await storedBlobs(srv)).parts.length === 0 || exited(srv));
}

/** Sends `head` and exactly `body`, then returns the server's answer. */
async function exchange(srv: TestServer, head: string, body: Buffer) {
  const c = await rawConnect(srv.port);
  await write(c.sock, Buffer.concat([Buffer.from(head), body]));
  const r = await survives(srv, c.response);
  c.sock.destroy();
  return r;
}

/**
 * Waits until the server is storing `n` files of the request (their temp parts exist). An S3 writer
 * holds a file shorter than a part in memory, so nothing shows in the bucket: there the bytes are
 * given time to arrive instead.
 */
async function storing(srv: TestServer, n: number): Promise<void> {
  if (srv.backend === 's3') await new Promise((r) => setTimeout(r, 1000));
  else await waitFor(n === 1 ? 'a temp part' : `${n} temp parts`, async () => (await storedBlobs(srv)).parts.length >= n);
}

for (const backend of backends()) {
  describe(`raw-socket uploads: malformed, over the cap, aborted (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { ANON_MAX_BUNDLE_BYTES: String(CAP) });
    });
    after(async () => {
      await srv?.close();
    });
    beforeEach(() => ensureRunning(srv));
    afterEach(() => assertNoServerErrors(srv));

    it('malformed multipart bodies are 400 JSON and keep nothing', { timeout: 60_000 }, async () => {
      const { upload_token: token } = await created(srv, [file('base.txt', 'appended to below')]);
      const before = await snapshot(srv);
      const b = newBoundary();
      const data = randomBytes(64 * 1024);
      const cases: Array<[string, string, Buffer]> = [
        // the body uses another boundary than the header announces
        ['garbage boundary', rawHead('/api/v1/upload', 'nope', 0), Buffer.concat([partHead(b, 'a.bin'), data, closing(b)])],
        // Content-Length is honest but the body stops inside the file: no closing delimiter
        ['truncated in a file', rawHead('/api/v1/upload', b, 0), Buffer.concat([partHead(b, 'a.bin'), data])],
        // a whole file, then the body ends where the next delimiter should be
        ['truncated after a file', rawHead('/api/v1/upload', b, 0), Buffer.concat([partHead(b, 'a.bin'), data, Buffer.from(`\r\n--${b}\r\n`)])],
        ['part header never ends', rawHead('/api/v1/upload', b, 0), Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="files[]"; filename="x"\r\n${'x'.repeat(100)}`)],
        ['no boundary parameter', rawHead('/api/v1/upload', b, 0).replace(`; boundary=${b}`, ''), Buffer.concat([partHead(b, 'a.bin'), data, closing(b)])],
        // Parts that are not kept, and the body ends inside them: their stream errs, which once killed
        // the process (an error event nobody listened to).
        ['ends inside a part of another field', rawHead('/api/v1/upload', b, 0),
          Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="other"; filename="a.txt"\r\n\r\nabc`)],
        ['ends inside an empty file input', rawHead('/api/v1/upload', b, 0),
          Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="files[]"; filename=""\r\n\r\nabc`)],
        ['ends inside a skipped part, on the append path', rawHead(`/api/v1/upload/${token}`, b, 0),
          Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="other"; filename="a.txt"\r\n\r\nabc`)],
        // The closing delimiter, then more parts: busboy took the form as complete and waited for the
        // last part's end for good (no answer until the idle timeout dropped the connection).
        ['parts after the closing delimiter', rawHead('/api/v1/upload', b, 0),
          Buffer.from(`--${b}--\r\n--${b}\r\n--${b}\r\nContent-Disposition: form-data; name="files[]"; filename="n"\r\n\r\nx`)],
      ];
      for (const [name, head, body] of cases) {
        const r = await exchange(srv, head.replace('Content-Length: 0', `Content-Length: ${body.length}`), body);
        assert.doesNotThrow(() => assertJsonError(r, 400), `${name}: ${r.status} ${r.body}`);
        await assertNothingKept(srv, before);
      }
      await assertServes(srv);
      await created(srv, [file('after.txt', 'still serving')]);
    });

    it('over the cap: 400 arrives before the body is sent, with Connection: close', { timeout: 60_000 }, async () => {
      const before = await snapshot(srv);
      const b = newBoundary();
      const announced = 64 * MiB;
      const c = await rawConnect(srv.port);
      await write(c.sock, rawHead('/api/v1/upload', b, announced) + partHead(b, 'huge.bin').toString());
      const writtenAtAnswer = await sendUntilAnswered(c, repeated(randomBytes(PIECE), announced));
      const r = await survives(srv, c.response).catch((err: unknown) =>
        assert.fail(`the 400 never reached the client, ${writtenAtAnswer} body bytes in: ${String(err)}`),
      );
      assertJsonError(r, 400, /size|limit|large/i);
      assert.equal(r.headers.connection, 'close', 'the client is told to close the connection');
      assert.equal(r.headers['cache-control'], 'no-store', 'an upload error is a JSON answer like any other');
      assert.ok(writtenAtAnswer !== null, 'answered while the body was still being sent');
      const by = Math.max(announced / 2, CAP + readWhilePaused());
      assert.ok(writtenAtAnswer < by, `answer came after ${writtenAtAnswer} of ${announced} body bytes (Node ${process.version})`);
      c.sock.destroy();
      await assertNothingKept(srv, before);
      await assertServes(srv);
    });

    it('over the cap: Node\'s http client, which sends on before it reads, still gets the 400', { timeout: 60_000 }, async () => {
      // Clients that read only after sending (Node's http, many scripts) must see the 400, not an
      // EPIPE/ECONNRESET from a reset that overtook it: the server neither closes nor reads on.
      const before = await snapshot(srv);
      const b = newBoundary();
      const body = Buffer.concat([partHead(b, 'huge.bin'), randomBytes(8 * CAP), closing(b)]);
      for (let i = 0; i < 30; i++) {
        const r = await new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
          const req = http.request(
            {
              host: '127.0.0.1', port: srv.port, method: 'POST', path: '/api/v1/upload', agent: false,
              headers: { 'content-type': `multipart/form-data; boundary=${b}`, 'content-length': body.length, connection: 'keep-alive' },
            },
            (res) => {
              let text = '';
              res.setEncoding('utf8');
              res.on('data', (d: string) => (text += d));
              res.on('end', () => {
                resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text });
                req.destroy();
              });
            },
          );
          req.on('error', reject);
          // In 64 KiB pieces, as a file stream would feed it.
          Readable.from((function* () {
            for (let at = 0; at < body.length; at += 64 * 1024) yield body.subarray(at, at + 64 * 1024);
          })()).pipe(req);
        }).catch((err: unknown) => assert.fail(`upload ${i}: no answer, ${String(err)}`));
        assert.equal(r.status, 400, r.body);
        assert.match(r.body, /size|limit|large/i);
        assert.equal(r.headers.connection, 'close');
      }
      await assertNothingKept(srv, before);
      await assertServes(srv);
    });

    it('over the cap: the server stops reading, and closes a connection the client keeps', { timeout: 60_000, skip: backend !== 'embedded' && 'the same uWS behaviour as embedded (slow: waits for the idle timeout)' }, async () => {
      const b = newBoundary();
      const c = await rawConnect(srv.port);
      // A chunked body never ends by itself: the server must neither drain it nor hold it forever.
      await write(c.sock, rawHead('/api/v1/upload', b, 0).replace('Content-Length: 0', 'Transfer-Encoding: chunked') );
      const piece = randomBytes(PIECE);
      const chunk = Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]);
      await write(c.sock, Buffer.concat([Buffer.from(`${partHead(b, 'x').length.toString(16)}\r\n`), partHead(b, 'x'), Buffer.from('\r\n')]));
      let sent = 0;
      let stalled = false;
      const t0 = Date.now();
      // Keep sending, without waiting for the kernel, until the socket stops taking bytes.
      while (!c.sock.destroyed && Date.now() - t0 < 20_000) {
        if (!c.sock.write(chunk)) {
          const drained = await Promise.race([
            new Promise<boolean>((r) => c.sock.once('drain', () => r(true))),
            new Promise<boolean>((r) => setTimeout(() => r(false), 1500)),
          ]);
          if (!drained) {
            stalled = true;
            break;
          }
        }
        sent += chunk.length;
      }
      const r = await survives(srv, c.response);
      assertJsonError(r, 400, /size|limit|large/i);
      assert.ok(stalled, `the server read on: ${sent} bytes sent`);
      // What the client got rid of is what the server read plus what the kernel buffers for a paused
      // reader: loopback's receive buffer grows up to tcp_rmem's maximum (32 MiB on some machines).
      const kernel = tcpBufferMax('tcp_rmem') + tcpBufferMax('tcp_wmem');
      assert.ok(sent < CAP + kernel + readWhilePaused() + 4 * MiB, `the server read on: ${sent} bytes of a refused body sent (kernel buffers ${kernel}, Node ${process.version})`);
      await Promise.race([
        c.closed,
        new Promise((_, reject) => setTimeout(() => reject(new Error('server held the connection 30 s')), 30_000)),
      ]);
      await assertServes(srv);
    });

    it('a client abort halfway through an upload keeps nothing', { timeout: 60_000 }, async () => {
      const before = await snapshot(srv);
      const b = newBoundary();
      const body = Buffer.concat([partHead(b, 'big.bin'), randomBytes(8 * MiB), closing(b)]);
      const c = await rawConnect(srv.port);
      await write(c.sock, rawHead('/api/v1/upload', b, body.length));
      await write(c.sock, body.subarray(0, body.length / 2));
      // The server has started storing the file before the client goes away.
      await storing(srv, 1);
      c.sock.destroy();
      await partsGone(srv);
      await assertServes(srv);
      await assertNothingKept(srv, before);
    });

    it('a client abort inside the second file of a request keeps neither file', { timeout: 60_000 }, async () => {
      const before = await snapshot(srv);
      const b = newBoundary();
      const first = Buffer.concat([partHead(b, 'one.bin'), randomBytes(3 * MiB), Buffer.from('\r\n')]);
      const second = Buffer.concat([partHead(b, 'two.bin'), randomBytes(3 * MiB), closing(b)]);
      const c = await rawConnect(srv.port);
      await write(c.sock, rawHead('/api/v1/upload', b, first.length + second.length));
      await write(c.sock, first);
      await write(c.sock, second.subarray(0, second.length / 2));
      await storing(srv, 2);
      c.sock.destroy();
      await partsGone(srv);
      await assertServes(srv);
      await assertNothingKept(srv, before);
    });

    it('an aborted append leaves the bundle as it was and frees its share of the cap', { timeout: 60_000 }, async () => {
      const bundle = await created(srv, [file('base.bin', randomBytes(4 * MiB))]);
      const before = await snapshot(srv);
      const b = newBoundary();
      const body = Buffer.concat([partHead(b, 'more.bin'), randomBytes(4 * MiB), closing(b)]);
      const c = await rawConnect(srv.port);
      await write(c.sock, rawHead(`/api/v1/upload/${bundle.upload_token}`, b, body.length));
      await write(c.sock, body.subarray(0, body.length - 1024));
      await storing(srv, 1);
      c.sock.destroy();
      await partsGone(srv);
      await assertServes(srv);
      await assertNothingKept(srv, before);
      const full = await survives(srv, upload(srv, [file('rest.bin', randomBytes(4 * MiB))], { path: `/api/v1/upload/${bundle.upload_token}` }));
      assert.equal(full.status, 200, JSON.stringify(full.json));
      const status = await call(srv, 'GET', `/api/v1/bundle/${bundle.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, CAP);
    });
  });
}
