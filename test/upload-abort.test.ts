import { describe, it, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import {
  MiB, file, created, upload, getJson, ensureRunning, assertServes, assertNoServerErrors, snapshot, assertNothingKept, waitFor,
  rawConnect, rawHead, partHead, closing, newBoundary, write, assertJsonError, survives, exited, stored,
} from './upload-util.ts';

/** Anonymous cap of this file's server: the aborted 8 MiB uploads below stay within it. */
const CAP = 8 * MiB;
const PIECE = 256 * 1024;

/** Waits for the temp parts of an aborted request to go (or for the server to die: assertServes says so). */
const partsGone = (srv: TestServer): Promise<void> =>
  waitFor('the temp parts to be removed', () => stored(srv.dataDir).parts.length === 0 || exited(srv));

/** Sends `head` and exactly `body`, then returns the server's answer. */
async function exchange(srv: TestServer, head: string, body: Buffer) {
  const c = await rawConnect(srv.port);
  await write(c.sock, Buffer.concat([Buffer.from(head), body]));
  const r = await survives(srv, c.response);
  c.sock.destroy();
  return r;
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
      let written = 0;
      let writtenAtAnswer = -1;
      const piece = randomBytes(PIECE);
      const answered = new Promise<void>((resolve) => c.sock.once('data', () => resolve()));
      while (written < announced) {
        // Let pending reads run first, so the client stops writing as soon as the answer is in.
        await new Promise((r) => setImmediate(r));
        if (c.answered() || c.sock.destroyed) break;
        // Wait for the kernel to take each piece, but stop as soon as the server answers.
        await Promise.race([write(c.sock, piece), answered]);
        if (c.answered()) break;
        written += PIECE;
      }
      if (c.answered()) writtenAtAnswer = written;
      const r = await survives(srv, c.response).catch((err: unknown) =>
        assert.fail(`the 400 never reached the client, ${written} body bytes in: ${String(err)}`),
      );
      assertJsonError(r, 400, /size|limit|large/i);
      assert.equal(r.headers.connection, 'close', 'the client is told to close the connection');
      assert.ok(writtenAtAnswer >= 0, 'answered while the body was still being sent');
      assert.ok(writtenAtAnswer < announced / 2, `answer came after ${writtenAtAnswer} of ${announced} body bytes`);
      c.sock.destroy();
      await assertNothingKept(srv, before);
      await assertServes(srv);
    });

    it('over the cap: a client that sends on after the 400 gets no reset and still reads the 400', { timeout: 60_000 }, async () => {
      // Clients that read only after sending (Node's http, many scripts) must see the 400, not
      // EPIPE/ECONNRESET: the server drops the rest of the body instead of slamming the door.
      const before = await snapshot(srv);
      const b = newBoundary();
      const body = Buffer.concat([partHead(b, 'huge.bin'), randomBytes(3 * CAP), closing(b)]);
      for (let i = 0; i < 5; i++) {
        const c = await rawConnect(srv.port);
        await write(c.sock, rawHead('/api/v1/upload', b, body.length));
        for (let at = 0; at < body.length; at += PIECE) {
          await write(c.sock, body.subarray(at, at + PIECE));
          assert.ok(!c.sock.destroyed, `the connection broke after ${at} body bytes`);
        }
        const r = await survives(srv, c.response);
        assertJsonError(r, 400, /size|limit|large/i);
        assert.equal(r.headers.connection, 'close');
        c.sock.destroy();
      }
      await assertNothingKept(srv, before);
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
      await waitFor('a temp part', () => stored(srv.dataDir).parts.length >= 1);
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
      await waitFor('two temp parts', () => stored(srv.dataDir).parts.length >= 2);
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
      await waitFor('a temp part', () => stored(srv.dataDir).parts.length >= 1);
      c.sock.destroy();
      await partsGone(srv);
      await assertServes(srv);
      await assertNothingKept(srv, before);
      const full = await survives(srv, upload(srv, [file('rest.bin', randomBytes(4 * MiB))], `/api/v1/upload/${bundle.upload_token}`));
      assert.equal(full.status, 200, JSON.stringify(full.json));
      const status = await getJson(srv, `/api/v1/bundle/${bundle.short_code}/status`);
      assert.equal(status.json.total_size_bytes, CAP);
    });
  });
}
