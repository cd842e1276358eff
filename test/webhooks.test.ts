/**
 * Webhooks against real servers and a receiver on loopback that checks every delivery with the
 * `standardwebhooks` package's verifier: the events of a key's bundles, delivery after a kill -9,
 * one delivery per event with two nodes, the address rules, and the endpoints API.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Webhook } from 'standardwebhooks';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { bearer, call, file, upload, uploaded, type Json } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';
import { prerequisite } from './helpers/prereq.ts';
import { mintKey } from './access-util.ts';

interface Delivery {
  readonly path: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
  readonly status: number;
}

interface Receiver {
  readonly url: string;
  readonly got: Delivery[];
  /** What it answers: a status for each request (the deliveries so far passed in); 0 never answers. */
  answer: (d: { path: string }, before: readonly Delivery[]) => number;
  close(): Promise<void>;
}

function receiver(): Promise<Receiver> {
  const got: Delivery[] = [];
  const r = { got, answer: (() => 200) as Receiver['answer'] };
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const status = r.answer({ path: req.url ?? '' }, got);
      got.push({ path: req.url ?? '', headers: req.headers, body, status });
      if (status === 0) return;
      if (status >= 300 && status < 400) res.setHeader('location', '/moved-here');
      res.writeHead(status).end('ok');
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      resolve(Object.assign(r, {
        url: `http://127.0.0.1:${port}/hook`,
        close: () => new Promise<void>((done) => {
          server.closeAllConnections();
          server.close(() => done());
        }),
      }));
    }),
  );
}

/** The event of a delivery, verified against `secret` by the standardwebhooks package (throws if forged). */
function verified(d: Delivery, secret: string): { type: string; timestamp: string; data: { short_code: string; files: Array<{ id: number; name: string; size: number }> } } {
  const h = (name: string): string => String(d.headers[name]);
  return new Webhook(secret).verify(d.body, { 'webhook-id': h('webhook-id'), 'webhook-timestamp': h('webhook-timestamp'), 'webhook-signature': h('webhook-signature') }) as never;
}

async function register(srv: TestServer, key: string, url: string, events?: string[]): Promise<{ status: number; json: Json }> {
  return call(srv, 'POST', '/api/v1/my/webhooks', {
    headers: { 'content-type': 'application/json', ...bearer(key) },
    body: JSON.stringify(events ? { url, events } : { url }),
    json: true,
  });
}

const ofType = (rx: Receiver, secret: string, type: string): ReturnType<typeof verified>[] =>
  rx.got.filter((d) => d.status === 200).map((d) => verified(d, secret)).filter((e) => e.type === type);

for (const backend of backends()) {
  describe(`webhook events of a key's bundles (${backend})`, () => {
    let srv: TestServer;
    let rx: Receiver;
    before(async () => {
      srv = await startServer(backend, { WEBHOOK_ALLOW_PRIVATE: '1' });
      rx = await receiver();
    });
    after(async () => {
      await srv?.close();
      await rx?.close();
    });

    test('every event is delivered signed, and verifies with standardwebhooks', async () => {
      const key = await mintKey(srv, 'starter');
      const made = await register(srv, key, rx.url);
      assert.equal(made.status, 201, JSON.stringify(made.json));
      const secret = made.json.secret as string;
      assert.match(secret, /^whsec_[A-Za-z0-9+/]+=*$/);
      const event = async (type: string, n = 1): Promise<ReturnType<typeof verified>> =>
        (await waitFor(`${n} ${type}`, () => (ofType(rx, secret, type).length >= n ? ofType(rx, secret, type) : null)))[n - 1]!;

      const b = await uploaded(srv, [file('a.txt', 'alpha'), file('b.txt', 'bravo!')], { key });
      const created = await event('bundle.created');
      assert.equal(created.data.short_code, b.short_code);
      assert.deepEqual(created.data.files, b.files.map((f: Json) => ({ id: f.id, name: f.name, size: f.size })));
      assert.match(created.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

      const added = await uploaded(srv, [file('c.txt', 'charlie')], { path: `/api/v1/upload/${b.upload_token}` });
      assert.deepEqual((await event('bundle.files_added')).data.files, [{ id: added.files[0].id, name: 'c.txt', size: 7 }]);

      const dl = await call(srv, 'GET', `/api/v1/download/${b.files[0].id}`);
      assert.equal(dl.status, 200);
      const downloaded = await event('file.downloaded');
      assert.deepEqual(downloaded.data, { short_code: b.short_code, files: [{ id: b.files[0].id, name: 'a.txt', size: 5 }] });

      const req = await call(srv, 'POST', '/api/v1/my/requests', { headers: { 'content-type': 'application/json', ...bearer(key) }, body: '{}', json: true });
      assert.equal((await upload(srv, [file('scan.pdf', 'pdf!')], { path: `/api/v1/requests/${req.json.request_token}/upload` })).status, 200);
      const received = await event('request.upload_received');
      assert.deepEqual(received.data.files.map((f) => f.name), ['scan.pdf']);

      assert.equal((await call(srv, 'DELETE', `/api/v1/my/bundles/${b.short_code}`, { headers: bearer(key) })).status, 200);
      assert.deepEqual((await event('bundle.deleted')).data.files.map((f) => f.name), ['a.txt', 'b.txt', 'c.txt']);

      const old = await uploaded(srv, [file('old.txt', 'old')], { key });
      await srv.sql`update bundles set expires_at = now() - interval '1 minute' where short_code = ${old.short_code}`;
      const swept = await srv.cli(['sweep']);
      assert.equal(swept.code, 0, swept.stderr);
      assert.equal((await event('bundle.expired')).data.short_code, old.short_code);

      // An anonymous bundle is nobody's: no event.
      await uploaded(srv, [file('anon.txt', 'x')]);
      // Each answer is recorded after the receiver has it: wait for the last record.
      const attempts = await waitFor('every delivery recorded', async () => {
        const log = await call(srv, 'GET', `/api/v1/my/webhooks/${made.json.webhook_id}/deliveries`, { headers: bearer(key), json: true });
        const list = log.json.deliveries as Json[];
        return list.length === rx.got.length ? list : undefined;
      });
      assert.ok(attempts.every((a) => a.status === 200 && a.error === null && /^msg_[0-9a-f]{32}$/.test(a.webhook_id_header)));
      assert.deepEqual(new Set(attempts.map((a) => a.webhook_id_header)), new Set(rx.got.map((d) => d.headers['webhook-id'])));
    });
  });
}

describe(`webhook endpoints (${backends()[0]})`, () => {
  let srv: TestServer;
  let strict: TestServer;
  let rx: Receiver;
  before(async () => {
    srv = await startServer(backends()[0]!, { WEBHOOK_ALLOW_PRIVATE: '1' });
    strict = await startServer(backends()[0]!);
    rx = await receiver();
  });
  after(async () => {
    await srv?.close();
    await strict?.close();
    await rx?.close();
  });

  test('bad input is 400, an 11th endpoint 409; the secret is shown once; another key sees nothing', async () => {
    const key = await mintKey(srv);
    for (const [url, events] of [['ftp://example.com/x', undefined], ['not a url', undefined], ['https://user:pw@example.com/', undefined], [rx.url, ['bundle.nope']], [rx.url, []]] as const) {
      const r = await register(srv, key, url, events as string[] | undefined);
      assert.equal(r.status, 400, JSON.stringify(r.json));
      assert.equal(r.json.code, 'INVALID_WEBHOOK');
    }
    assert.equal((await call(srv, 'POST', '/api/v1/my/webhooks', { headers: { 'content-type': 'application/json', ...bearer(key) }, body: '[1]', json: true })).status, 400);
    assert.equal((await call(srv, 'POST', '/api/v1/my/webhooks', { headers: { 'content-type': 'application/json' }, body: '{}', json: true })).status, 401);
    const ids: number[] = [];
    for (let i = 0; i < 10; i++) ids.push((await register(srv, key, `${rx.url}?n=${i}`, ['bundle.created'])).json.webhook_id as number);
    const over = await register(srv, key, rx.url);
    assert.equal(over.status, 409);
    assert.equal(over.json.code, 'TOO_MANY_WEBHOOKS');
    const listed = await call(srv, 'GET', '/api/v1/my/webhooks', { headers: bearer(key), json: true });
    assert.equal((listed.json.webhooks as Json[]).length, 10);
    assert.ok(!JSON.stringify(listed.json).includes('whsec_'), 'no secret in the list');
    assert.deepEqual(Object.keys((listed.json.webhooks as Json[])[0]!).sort(), ['created_at', 'disabled_reason', 'events', 'url', 'webhook_id']);
    const other = await mintKey(srv);
    assert.equal((await call(srv, 'GET', `/api/v1/my/webhooks/${ids[0]}/deliveries`, { headers: bearer(other), json: true })).status, 404);
    assert.equal((await call(srv, 'DELETE', `/api/v1/my/webhooks/${ids[0]}`, { headers: bearer(other), json: true })).status, 404);
    assert.equal((await call(srv, 'DELETE', `/api/v1/my/webhooks/${ids[0]}`, { headers: bearer(key), json: true })).status, 200);
    assert.equal((await call(srv, 'DELETE', `/api/v1/my/webhooks/${ids[0]}`, { headers: bearer(key), json: true })).status, 404);
  });

  test('without WEBHOOK_ALLOW_PRIVATE, a loopback endpoint is refused at registration', async () => {
    const key = await mintKey(strict);
    const literals = ['http://127.0.0.1:9/', 'http://localhost:9/', 'http://[::1]:9/', 'http://169.254.169.254/latest/meta-data/', 'http://10.0.0.1/',
      'http://[::ffff:7f00:1]/', 'http://[::ffff:a9fe:a9fe]/', 'http://[64:ff9b::a00:5]/', 'http://[fd00::1]/', 'http://[fe80::1]/'];
    for (const url of literals) {
      const r = await register(strict, key, url);
      assert.equal(r.status, 400, url);
      assert.match(r.json.error as string, /resolves to a loopback, private, link-local or metadata address$/, url);
    }
  });

  test('a redirect is not followed; a receiver that never answers holds up nothing else', async () => {
    const key = await mintKey(srv);
    const moved = await register(srv, key, `${rx.url}/redirect`, ['bundle.created']);
    await register(srv, key, `${rx.url}/silent`, ['bundle.created']);
    const prompt = await register(srv, key, `${rx.url}/prompt`, ['bundle.created']);
    rx.answer = (d) => (d.path.endsWith('/redirect') ? 302 : d.path.endsWith('/silent') ? 0 : 200);
    await uploaded(srv, [file('r.txt', 'r')], { key });
    await waitFor('the prompt endpoint served while the silent one waits', () => rx.got.some((d) => d.path.endsWith('/prompt') && d.status === 200));
    assert.equal(verified(rx.got.find((d) => d.path.endsWith('/prompt'))!, prompt.json.secret as string).type, 'bundle.created');
    const attempt = await waitFor('the attempt', async () => {
      const r = await call(srv, 'GET', `/api/v1/my/webhooks/${moved.json.webhook_id}/deliveries`, { headers: bearer(key), json: true });
      return (r.json.deliveries as Json[])[0];
    });
    assert.equal(attempt.status, 302);
    assert.match(attempt.error as string, /HTTP 302/);
    assert.ok(!rx.got.some((d) => d.path === '/moved-here'), 'the redirect was not followed');
    rx.answer = () => 200;
  });
});

describe(`webhooks survive a kill -9 (${backends()[0]})`, () => {
  let srv: TestServer;
  let rx: Receiver;
  before(async () => {
    srv = await startServer(backends()[0]!, { WEBHOOK_ALLOW_PRIVATE: '1' });
    rx = await receiver();
  });
  after(async () => {
    await srv?.close();
    await rx?.close();
  });

  test('an event whose delivery failed is delivered after the server is killed and restarted, once, with the same webhook-id', async () => {
    const key = await mintKey(srv);
    const made = await register(srv, key, rx.url, ['bundle.created']);
    rx.answer = (_d, before) => (before.length === 0 ? 500 : 200);
    const b = await uploaded(srv, [file('k.txt', 'kill')], { key });
    const deliveries = async (): Promise<Json[]> =>
      (await call(srv, 'GET', `/api/v1/my/webhooks/${made.json.webhook_id}/deliveries`, { headers: bearer(key), json: true })).json.deliveries as Json[];
    await waitFor('the failed attempt recorded', async () => (await deliveries()).length === 1);
    await srv.kill();
    await srv.restart();
    await waitFor('the retry delivered', () => rx.got.some((d) => d.status === 200), 30_000);
    const ids = rx.got.map((d) => d.headers['webhook-id']);
    assert.equal(new Set(ids).size, 1, 'the same webhook-id on every attempt');
    assert.equal(rx.got.filter((d) => d.status === 200).length, 1, 'delivered once');
    assert.equal(verified(rx.got[1]!, made.json.secret as string).data.short_code, b.short_code);
    // The receiver hears the delivery before the server records its answer: wait for the record.
    const log = await waitFor('the delivery recorded', async () => {
      const d = await deliveries();
      return d.length === 2 ? d : undefined;
    });
    assert.deepEqual(log.map((a) => a.status), [200, 500]);
  });
});

const twoNodes = backends().includes('postgres') ? false : 'two nodes need PostgreSQL (SLUICE_TEST_BACKENDS includes postgres)';
describe('webhooks with two nodes on one database', { skip: twoNodes }, () => {
  let a: TestServer;
  let b: TestServer;
  let rx: Receiver;
  before(async () => {
    // Nodes of one cluster share SECRET: either opens the endpoints' sealed signing secrets.
    const secret = 'webhook-two-nodes-secret-0123456789abcdef';
    a = await startServer('postgres', { WEBHOOK_ALLOW_PRIVATE: '1', SECRET: secret });
    b = await startServer('postgres', { WEBHOOK_ALLOW_PRIVATE: '1', SECRET: secret, DATABASE_URL: a.env.DATABASE_URL!, REDIS_URL: a.env.REDIS_URL! });
    rx = await receiver();
  });
  after(async () => {
    await b?.close();
    await a?.close();
    await rx?.close();
  });

  test('each event is delivered once, by one of the nodes', async () => {
    const key = await mintKey(a);
    const made = await register(a, key, rx.url, ['bundle.created']);
    const codes = new Set<string>();
    for (let i = 0; i < 20; i++) codes.add((await uploaded(i % 2 ? b : a, [file(`n${i}.txt`, String(i))], { key })).short_code as string);
    await waitFor('20 events delivered', () => rx.got.length >= 20, 30_000);
    // The receiver answers before the delivering node records the delivery: wait for the records too.
    const recorded = async () => a.sql<{ attempts: number; delivered: boolean }[]>`
      select attempts, delivered_at is not null as delivered from webhook_events where webhook_id = ${made.json.webhook_id as number}`;
    const events = await waitFor('20 deliveries recorded', async () => {
      const rows = await recorded();
      return rows.length === 20 && rows.every((e) => e.delivered) ? rows : null;
    });
    assert.equal(events.length, 20);
    assert.ok(events.every((e) => e.delivered && e.attempts === 1), 'one attempt each');
    assert.equal(new Set(rx.got.map((d) => d.headers['webhook-id'])).size, rx.got.length, 'no webhook-id twice');
    assert.deepEqual(new Set(rx.got.map((d) => verified(d, made.json.secret as string).data.short_code)), codes);
  });
});

const asRoot = process.getuid?.() === 0 ? false : 'names resolving to chosen addresses need a mount namespace (root)';
describe(`webhook addresses by name (${backends()[0]})`, { skip: prerequisite({ what: 'webhook address rules by name', missing: asRoot, install: 'run the tests as root' }) }, () => {
  let srv: TestServer;
  let rx: Receiver;
  let hosts: string;
  before(async () => {
    hosts = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sl-hosts-')), 'hosts');
    fs.writeFileSync(hosts, '127.0.0.1 localhost\n127.0.0.1 loopy.test\n10.1.2.3 tenten.test\n169.254.169.254 metadata.test\n::1 sixer.test\n93.184.216.34 flip.test\n');
    srv = await startServer(backends()[0]!, { SLUICE_TEST_HOSTS: hosts });
    rx = await receiver();
  });
  after(async () => {
    await srv?.close();
    await rx?.close();
    fs.rmSync(path.dirname(hosts), { recursive: true, force: true });
  });

  test('names of loopback, private, metadata and IPv6 loopback addresses are refused; the address is checked again at delivery', async () => {
    const key = await mintKey(srv);
    // The refusal names the host, never the address it resolved to (which would map the server's network).
    for (const name of ['loopy.test', 'tenten.test', 'metadata.test', 'sixer.test']) {
      const r = await register(srv, key, `http://${name}:${new URL(rx.url).port}/hook`);
      assert.equal(r.status, 400, name);
      assert.equal(r.json.error, `url: ${name} resolves to a loopback, private, link-local or metadata address`);
    }
    // A name that resolved to a public address when registered, and to loopback when delivered to.
    const made = await register(srv, key, `http://flip.test:${new URL(rx.url).port}/hook`, ['bundle.created']);
    assert.equal(made.status, 201, JSON.stringify(made.json));
    fs.writeFileSync(hosts, '127.0.0.1 localhost\n127.0.0.1 flip.test\n');
    await uploaded(srv, [file('f.txt', 'f')], { key });
    const attempt = await waitFor('the refused attempt', async () => {
      const r = await call(srv, 'GET', `/api/v1/my/webhooks/${made.json.webhook_id}/deliveries`, { headers: bearer(key), json: true });
      return (r.json.deliveries as Json[])[0];
    });
    assert.equal(attempt.status, null);
    assert.equal(attempt.error, 'flip.test resolves to a loopback, private, link-local or metadata address');
    assert.equal(rx.got.length, 0, 'the receiver was never contacted');
  });
});
