/**
 * A client that asks for a large file and never reads it: the server closes the response after the
 * stall timeout (shortened here) and counts it, and a reader that keeps reading is never cut off.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { created, MiB, sha } from './upload-util.ts';
import { file } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

async function stalledCount(srv: TestServer): Promise<number> {
  const text = await (await request(`${srv.url}/metrics`)).body.text();
  const m = /^sluice_stalled_responses_closed_total (\d+)/m.exec(text);
  assert.ok(m, 'sluice_stalled_responses_closed_total is exported');
  return Number(m[1]);
}

/**
 * A GET on a raw socket that does not read. A client that does not read cannot see the server close
 * either: `drain()` starts reading and resolves with the body bytes that came before the end.
 */
function neverRead(port: number, path: string): { drain(): Promise<number> } {
  const sock = net.connect(port, '127.0.0.1');
  sock.pause();
  sock.on('error', () => {});
  let bytes = 0;
  const closed = new Promise<void>((resolve) => sock.on('close', () => resolve()));
  sock.on('data', (c: Buffer) => (bytes += c.length));
  sock.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  return {
    async drain() {
      sock.resume();
      const timer = setTimeout(() => sock.destroy(new Error('still open')), 10_000);
      await closed;
      clearTimeout(timer);
      return bytes;
    },
  };
}


for (const backend of backends()) {
  describe(`slow readers (${backend})`, () => {
    let srv: TestServer;
    const data = randomBytes(64 * MiB);
    let path: string;

    before(async () => {
      srv = await startServer(backend, { DOWNLOAD_STALL_TIMEOUT_SECONDS: '4' });
      path = (await created(srv, [file('big.bin', data)])).files[0]!.download_url;
    });
    after(async () => {
      await srv?.close();
    });

    test('a client that never reads is closed after the stall timeout, and counted', async () => {
      const before = await stalledCount(srv);
      const started = Date.now();
      const clients = [neverRead(srv.port, path), neverRead(srv.port, `${path}?x=1`)];
      await waitFor('both stalled responses closed', async () => (await stalledCount(srv)) === before + 2, 20_000);
      assert.ok(Date.now() - started >= 3_500, 'closed before the timeout');
      for (const c of clients) assert.ok((await c.drain()) < data.length, 'the connection ends short of the body');
      // The server still serves, and a reader that pauses for less than the timeout gets everything.
      const res = await request(`${srv.url}${path}`);
      const chunks: Buffer[] = [];
      let paused = false;
      for await (const c of res.body) {
        chunks.push(c as Buffer);
        if (!paused) {
          paused = true;
          await new Promise((r) => setTimeout(r, 1_200)); // past the 1 s buffer release, well short of the 4 s stall timeout
        }
      }
      assert.equal(sha(Buffer.concat(chunks)), sha(data));
    });
  });
}

describe('slow readers: the stall timeout decides, not the transport', () => {
  test('a client that takes nothing for longer than uWS\'s own 10 s HTTP timeout is still served whole', async () => {
    const srv = await startServer(backends()[0]!, { DOWNLOAD_STALL_TIMEOUT_SECONDS: '30' });
    try {
      const data = randomBytes(32 * MiB);
      const { download_url: path } = (await created(srv, [file('big.bin', data)])).files[0]!;
      const before = await stalledCount(srv);
      const sock = net.connect(srv.port, '127.0.0.1');
      sock.pause();
      sock.on('error', () => {});
      const chunks: Buffer[] = [];
      sock.on('data', (c: Buffer) => chunks.push(c));
      const closed = new Promise<void>((resolve) => sock.on('close', () => resolve()));
      sock.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      // uWS closes a response whose client took nothing 8-12 s after the failed write.
      await new Promise((r) => setTimeout(r, 13_000));
      sock.resume();
      await closed;
      const raw = Buffer.concat(chunks);
      const body = raw.subarray(raw.indexOf('\r\n\r\n') + 4);
      assert.equal(sha(body), sha(data), 'the whole body arrived');
      assert.equal(await stalledCount(srv), before);
    } finally {
      await srv.close();
    }
  });
});
