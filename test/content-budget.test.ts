/**
 * The web content paths' own budget per client address (requests per minute, misses per hour),
 * apart from the API budget, and IPv6 clients counted per /64 for every budget.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomInt } from 'node:crypto';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { assertError, from, isolateIds, randomLoopback } from './access-util.ts';
import { call, uploaded, type Res } from './helpers/http.ts';

const metric = (text: string, name: string): number =>
  text.split('\n').filter((l) => l.startsWith(name)).reduce((n, l) => n + Number(l.split(' ').pop()), 0);

/** A random 5-character code: almost surely no bundle's. */
const randomCode = (): string => randomBytes(8).toString('base64').replace(/[^a-zA-Z0-9]/g, '').slice(0, 5).padEnd(5, 'z');
/** A /64 of its own per run (2001:db8::/32 is the documentation prefix). */
const randomNet = (): string => `2001:db8:${randomInt(0, 0xffff).toString(16)}:${randomInt(0, 0xffff).toString(16)}`;

for (const backend of backends()) {
  describe(`content budget (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, {
        HOST: '0.0.0.0',
        RATE_LIMIT_CONTENT_PER_MINUTE: '8',
        RATE_LIMIT_CONTENT_MISSES_PER_HOUR: '3',
        RATE_LIMIT_ANON_PER_HOUR: '100',
      });
      await isolateIds(srv);
    });
    after(() => srv.close());

    test('past the per-minute budget: 429 with Retry-After, JSON on files, a page on pages; API and other addresses unaffected', async () => {
      const b = await uploaded(srv, [{ name: 'a.txt', data: 'hello' }]);
      const agent = from(randomLoopback());
      const paths = [`/d/${b.files[0].id}`, `/${b.short_code}`, `/zip/${b.short_code}`, `/og/${b.short_code}.png`];
      for (let i = 0; i < 8; i++) {
        const r = await call(srv, i % 2 ? 'HEAD' : 'GET', paths[i % paths.length]!, { agent });
        assert.equal(r.status, 200, `request ${i + 1} of 8 (${paths[i % paths.length]}): ${r.text}`);
      }
      const file = await call(srv, 'GET', `/d/${b.files[0].id}`, { agent });
      assertError(file, 429, 'the 9th content request');
      assert.ok(Number(file.headers['retry-after']) > 0 && Number(file.headers['retry-after']) <= 60, `Retry-After ${file.headers['retry-after']}`);
      assert.equal(file.headers['x-ratelimit-limit'], '8');
      assert.equal(file.headers['x-ratelimit-remaining'], '0');
      const page = await call(srv, 'GET', `/${b.short_code}`, { agent });
      assert.equal(page.status, 429);
      assert.match(String(page.headers['content-type']), /^text\/html/);
      assert.match(page.text, /Too many requests/);
      assert.ok(Number(page.headers['retry-after']) > 0);
      // The API budget is another one: untouched by the content requests.
      const api = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}`, { agent });
      assert.equal(api.status, 200);
      assert.equal(api.headers['x-ratelimit-remaining'], '99');
      // Another address has its own budget; the home page and assets are not budgeted.
      assert.equal((await call(srv, 'GET', `/d/${b.files[0].id}`, { agent: from(randomLoopback()) })).status, 200);
      assert.equal((await call(srv, 'GET', '/', { agent })).status, 200);
      await agent.close();
    });

    test('past the miss budget every content path is refused, hits included; counted in /metrics', async () => {
      const b = await uploaded(srv, [{ name: 'b.txt', data: 'world' }]);
      const before = await call(srv, 'GET', '/metrics');
      const agent = from(randomLoopback());
      // What browsers and bots ask for by themselves is no guess: 404, but no miss.
      for (const p of ['/favicon.ico', '/robots.txt', '/apple-touch-icon.png', '/apple-touch-icon-precomposed.png']) {
        assert.equal((await call(srv, 'GET', p, { agent })).status, 404, p);
      }
      const misses = [`/${randomCode()}`, '/d/999999999999', `/zip/${randomCode()}`];
      for (const p of misses) assert.equal((await call(srv, 'HEAD', p, { agent })).status, 404, p);
      // An enumerator must not tell hits from misses by the status: the existing bundle is refused too.
      const hit = await call(srv, 'HEAD', `/${b.short_code}`, { agent });
      assert.equal(hit.status, 429);
      assert.equal(hit.headers['x-ratelimit-limit'], '3');
      const retry = Number(hit.headers['retry-after']);
      assert.ok(retry > 60 && retry <= 3600, `an hour's window: Retry-After ${retry}`);
      assertError(await call(srv, 'GET', `/d/${b.files[0].id}`, { agent }), 429, 'a file after the misses');
      // Another address still gets the file.
      assert.equal((await call(srv, 'GET', `/d/${b.files[0].id}`, { agent: from(randomLoopback()) })).status, 200);
      const after = await call(srv, 'GET', '/metrics');
      assert.equal(metric(after.text, 'sluice_content_misses_total') - metric(before.text, 'sluice_content_misses_total'), 3);
      const refused = (t: string): number => metric(t, 'sluice_content_rate_limited_total{budget="misses"}');
      assert.equal(refused(after.text) - refused(before.text), 2);
      await agent.close();
    });
  });

  describe(`IPv6 clients count per /64 (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, {
        TRUST_PROXY: '127.0.0.1',
        RATE_LIMIT_CONTENT_PER_MINUTE: '4',
        RATE_LIMIT_ANON_PER_HOUR: '100',
      });
      await isolateIds(srv);
    });
    after(() => srv.close());

    const via = (ip: string): { headers: Record<string, string> } => ({ headers: { 'x-forwarded-for': ip } });

    test('the API budget: addresses of one /64 share it, another /64 has its own', async () => {
      const net = randomNet();
      const remaining: Array<string | undefined> = [];
      for (const host of ['::1', ':a:b:c:d', ':0:0:0:2', ':ffff:ffff:ffff:ffff']) {
        const r = await call(srv, 'GET', `/api/v1/bundle/${randomCode()}`, via(`${net}${host}`));
        remaining.push(r.headers['x-ratelimit-remaining'] as string);
      }
      assert.deepEqual(remaining, ['99', '98', '97', '96']);
      const other = await call(srv, 'GET', `/api/v1/bundle/${randomCode()}`, via(`${randomNet()}::1`));
      assert.equal(other.headers['x-ratelimit-remaining'], '99');
    });

    test('the content budget: one /64 shares it; IPv4-mapped IPv6 is the IPv4 client', async () => {
      const net = randomNet();
      for (let i = 1; i <= 4; i++) assert.equal((await call(srv, 'HEAD', '/d/999999999998', via(`${net}::${i}`))).status, 404);
      assert.equal((await call(srv, 'HEAD', '/d/999999999998', via(`${net}::5`))).status, 429);
      const v4 = `198.51.100.${randomInt(1, 255)}`;
      for (const ip of [v4, `::ffff:${v4}`, v4, `::ffff:${v4}`]) {
        assert.equal((await call(srv, 'HEAD', '/d/999999999998', via(ip))).status, 404, ip);
      }
      assert.equal((await call(srv, 'HEAD', '/d/999999999998', via(v4))).status, 429, 'one budget for both spellings');
    });

    test('the wrong-password throttle counts per /64; an access token holds across the /64', async () => {
      const b = await uploaded(srv, [{ name: 'p.txt', data: 'locked' }], { fields: { access_password: 'right' } });
      const net = randomNet();
      const guess = (ip: string, password: string): Promise<Res> =>
        call(srv, 'POST', '/api/verify-access', {
          headers: { 'content-type': 'application/json', 'x-forwarded-for': ip },
          body: JSON.stringify({ short_code: b.short_code, password }),
        });
      // Ten wrong guesses, each from another address of the /64: the eleventh is refused untried.
      for (let i = 1; i <= 10; i++) assertError(await guess(`${net}:${i}:${i}:${i}:${i}`, `wrong ${i}`), 403, `guess ${i}`);
      assertError(await guess(`${net}::beef`, 'right'), 429, 'an eleventh address of the same /64');
      // Another /64 is not locked out, and its token opens the files from anywhere in that /64 only.
      const other = randomNet();
      const tok = await guess(`${other}::1`, 'right');
      assert.equal(tok.status, 200, tok.text);
      const token = tok.json.access_token as string;
      const open = (ip: string): Promise<Res> =>
        call(srv, 'HEAD', `/d/${b.files[0].id}`, { headers: { 'x-forwarded-for': ip, 'x-access-token': token } });
      assert.equal((await open(`${other}::1`)).status, 200);
      assert.equal((await open(`${other}:1:2:3:4`)).status, 200, 'another address of the same /64');
      assert.equal((await open(`${randomNet()}::1`)).status, 404, 'another /64');
    });
  });
}
