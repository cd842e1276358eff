// Request framing: a request whose body length is in doubt (Content-Length twice, or beside
// Transfer-Encoding) is a request-smuggling building block. It is refused with 400 and the
// connection closed, and nothing sent behind it on that connection is answered.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from './helpers/server.ts';
import { assertJsonError, assertServes, rawConnect, write } from './upload-util.ts';

/** Sends `raw` on a fresh connection; returns every byte the server sent before it closed. */
async function exchange(srv: TestServer, raw: string): Promise<string> {
  const c = await rawConnect(srv.port);
  let got = '';
  c.sock.on('data', (d: Buffer) => (got += d.toString('latin1')));
  await write(c.sock, raw);
  await Promise.race([
    c.closed,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`connection still open after 5 s; got ${JSON.stringify(got)}`)), 5000)),
  ]);
  return got;
}

/** The one response in `got`: its status and, for a JSON one, the error shape. */
function only(got: string): { status: number; json: boolean } {
  const statuses = [...got.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
  assert.equal(statuses.length, 1, `one response expected: ${JSON.stringify(got)}`);
  return { status: statuses[0]!, json: /content-type: application\/json/i.test(got) };
}

const post = (headers: string, body: string): string =>
  `POST /api/v1/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n${headers}\r\n${body}`;
const healthz = 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';

describe('request framing', () => {
  let srv: TestServer;
  before(async () => {
    // Refused before any handler or database work: one backend is enough.
    srv = await startServer('embedded');
  });
  after(async () => {
    await srv?.close();
  });

  it('duplicate or conflicting Content-Length, or Content-Length with chunked: 400, closed, nothing behind it answered', async () => {
    const cases: Array<[string, string]> = [
      ['conflicting lengths', post('Content-Length: 5\r\nContent-Length: 9\r\n', 'hello')],
      ['the same length twice', post('Content-Length: 5\r\nContent-Length: 5\r\n', 'hello')],
      ['on a GET', 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nContent-Length: 3\r\n\r\n'],
    ];
    for (const [name, raw] of cases) {
      const got = await exchange(srv, raw);
      const r = only(got);
      assert.equal(r.status, 400, `${name}: ${got}`);
      assert.ok(r.json, `${name}: the interface's JSON error: ${got}`);
      const body = got.slice(got.indexOf('\r\n\r\n') + 4);
      assertJsonError({ status: r.status, headers: { 'content-type': 'application/json' }, body }, 400, /Content-Length/);
      assert.match(got, /\r\nConnection: close\r\n/i, name);
    }
    // Refused by the binding's parser itself (its own 400 page) or, should a binding let them through, by the server.
    const refused: Array<[string, string]> = [
      ['Transfer-Encoding beside Content-Length', post('Content-Length: 5\r\nTransfer-Encoding: chunked\r\n', '5\r\nhello\r\n0\r\n\r\n')],
      ['Content-Length after Transfer-Encoding', post('Transfer-Encoding: chunked\r\nContent-Length: 5\r\n', '5\r\nhello\r\n0\r\n\r\n')],
      ['a list of lengths', post('Content-Length: 5, 9\r\n', 'hello')],
      ['a signed length', post('Content-Length: +5\r\n', 'hello')],
    ];
    for (const [name, raw] of refused) {
      const got = await exchange(srv, raw);
      assert.equal(only(got).status, 400, `${name}: ${got}`);
    }
    // The smuggling shape: a second request hidden where one parser sees body bytes. It is never answered.
    const whole = 5 + healthz.length;
    for (const lengths of [`Content-Length: 5\r\nContent-Length: ${whole}\r\n`, `Content-Length: ${whole}\r\nContent-Length: 5\r\n`]) {
      const got = await exchange(srv, post(lengths, `hello${healthz}`));
      assert.doesNotMatch(got, /HTTP\/1\.1 200/, `the hidden request was answered: ${JSON.stringify(got)}`);
      assert.doesNotMatch(got, /HTTP\/1\.1 [0-9]{3}[\s\S]*HTTP\/1\.1/, `two responses: ${JSON.stringify(got)}`);
    }
    await assertServes(srv);
  });

  it('one plain Content-Length is unaffected, also with a request pipelined behind it', async () => {
    const got = await exchange(srv, `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n${healthz.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n')}`);
    assert.equal([...got.matchAll(/HTTP\/1\.1 200/g)].length, 2, got);
  });
});
