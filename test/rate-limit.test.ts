import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { Agent, request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { multipart } from './helpers/multipart.ts';
import { overBudgetText } from '../src/auth/access.ts';
import type { Caller } from '../src/auth/caller.ts';
import type { ApiKeyRow } from '../src/db/api-keys.ts';
import type { PlanName } from '../src/plans.ts';

// A fresh loopback source address per run keeps the shared Redis bucket of this test its own.
const randomLoopback = (): string => `127.${randomInt(1, 255)}.${randomInt(0, 255)}.${randomInt(1, 255)}`;
const from = (ip: string): Agent => new Agent({ localAddress: ip });

for (const backend of backends()) {
  describe(`rate limiting (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      // The interface's anonymous budget: 60 per hour, headers start at 60 and 59.
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: '60', HOST: '0.0.0.0' });
    });
    after(() => srv.close());

    test('the 61st anonymous request in an hour gets 429 with Retry-After; another address is unaffected', async () => {
      const ip = randomLoopback();
      const agent = from(ip);
      const url = `http://127.0.0.1:${srv.port}/api/v1/bundle/abcde`;
      for (let i = 1; i <= 60; i++) {
        const r = await request(url, { dispatcher: agent });
        await r.body.dump();
        assert.equal(r.statusCode, 404);
        assert.equal(r.headers['x-ratelimit-limit'], '60');
        assert.equal(r.headers['x-ratelimit-remaining'], String(60 - i));
      }
      const r = await request(url, { dispatcher: agent });
      const body = (await r.body.json()) as { success: boolean; error: string };
      assert.equal(r.statusCode, 429);
      assert.equal(body.success, false);
      // The body says what the budget is, when it resets and how to get a bigger one.
      assert.match(body.error, /^Rate limit exceeded: an address without an API key may make 60 requests an hour; the budget resets in \d+ (seconds|minutes) \(Retry-After gives the seconds\)\. An API key allows 300 or more: see \/api-keys\.$/);
      assert.equal(r.headers['x-ratelimit-remaining'], '0');
      assert.ok(Number(r.headers['retry-after']) > 0);

      // Uploads count too and are refused once the budget is spent.
      const { body: form, contentType } = multipart([{ name: 'files[]', filename: 'a.txt', data: Buffer.from('x') }]);
      const up = await request(`http://127.0.0.1:${srv.port}/api/v1/upload`, {
        method: 'POST',
        body: form,
        headers: { 'content-type': contentType },
        dispatcher: agent,
      });
      await up.body.dump();
      assert.equal(up.statusCode, 429);

      // Another address is unaffected; web and health paths do not spend the API budget.
      const other = await request(url, { dispatcher: from(randomLoopback()) });
      await other.body.dump();
      assert.equal(other.statusCode, 404);
      assert.equal(other.headers['x-ratelimit-remaining'], '59');
      const health = await request(`http://127.0.0.1:${srv.port}/healthz`, { dispatcher: agent });
      await health.body.dump();
      assert.equal(health.statusCode, 200);
      await agent.close();
    });
  });
}

for (const backend of backends()) {
  describe(`client address behind a trusted proxy (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: '60', HOST: '0.0.0.0', TRUST_PROXY: '127.0.0.1' });
    });
    after(() => srv.close());

    test('X-Forwarded-For from the trusted proxy names the client; from an untrusted peer it is ignored', async () => {
      const client = randomLoopback();
      const url = `http://127.0.0.1:${srv.port}/api/v1/bundle/abcde`;
      const viaProxy = async (): Promise<string | string[] | undefined> => {
        const r = await request(url, { headers: { 'x-forwarded-for': client } });
        await r.body.dump();
        return r.headers['x-ratelimit-remaining'];
      };
      assert.equal(await viaProxy(), '59');
      assert.equal(await viaProxy(), '58'); // one bucket for that client, not for the proxy
      // From an untrusted peer the header is a lie: the peer's own bucket counts.
      const liar = from(randomLoopback());
      const r = await request(url, { headers: { 'x-forwarded-for': client }, dispatcher: liar });
      await r.body.dump();
      assert.equal(r.headers['x-ratelimit-remaining'], '59');
      await liar.close();
    });

    test('an X-Forwarded-For entry with a port names its client, not the proxy', async () => {
      const url = `http://127.0.0.1:${srv.port}/api/v1/bundle/abcde`;
      const remaining = async (xff: string): Promise<string | string[] | undefined> => {
        const r = await request(url, { headers: { 'x-forwarded-for': xff } });
        await r.body.dump();
        return r.headers['x-ratelimit-remaining'];
      };
      const v4 = randomLoopback();
      assert.equal(await remaining(`${v4}:80`), '59');
      assert.equal(await remaining(v4), '58', 'the same client with or without the port');
      assert.equal(await remaining(`${v4}:5123`), '57');
      const v6 = `2001:db8:${randomInt(0, 0xffff).toString(16)}::1`;
      assert.equal(await remaining(`[${v6}]:443`), '59');
      assert.equal(await remaining(v6), '58');
    });
  });
}

describe('the 429 text of the hourly budget', () => {
  const keyed = (plan: PlanName): Caller => ({ ip: '192.0.2.1', uploader: { apiKeyId: 1, maxBundleBytes: 1, expiryDays: 1 }, apiKey: { plan } as ApiKeyRow, bearerRejected: false });
  test('a key is told its plan, when its budget resets, and the larger plan', () => {
    assert.equal(
      overBudgetText(keyed('starter'), 300, 754_000),
      "Rate limit exceeded: this API key's Starter plan allows 300 requests an hour; the budget resets in 13 minutes (Retry-After gives the seconds). A larger plan allows 1200 or more: see /api-keys.",
    );
    assert.match(overBudgetText(keyed('max'), 1200, 30_000), /Max plan allows 1200 requests an hour; the budget resets in 30 seconds .* No plan allows more\.$/);
  });
});
