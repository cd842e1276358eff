import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pino from 'pino';
import { createMemoryRateStore, createRedisRateStore, type RateStore } from '../src/state/rate-store.ts';

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const stores: Array<[string, () => RateStore | Promise<RateStore>]> = [['memory', () => createMemoryRateStore()]];
if (!process.env.SLUICE_TEST_BACKENDS || process.env.SLUICE_TEST_BACKENDS.includes('postgres')) {
  stores.push(['redis', () => createRedisRateStore(REDIS_URL, pino({ level: 'silent' }), `sluice:test:${randomBytes(4).toString('hex')}:`)]);
}

// One contract, every implementation.
for (const [name, make] of stores) {
  describe(`rate store contract (${name})`, async () => {
    const store = await make();
    after(() => store.close());

    test('counts hits per key within a window', async () => {
      const a = await store.hit('a', 60_000);
      const b = await store.hit('a', 60_000);
      const other = await store.hit('b', 60_000);
      assert.equal(a.count, 1);
      assert.equal(b.count, 2);
      assert.equal(other.count, 1);
      assert.ok(b.resetMs > 0 && b.resetMs <= 60_000);
    });

    test('a new window starts after the old one ends', async () => {
      await store.hit('short', 50);
      await store.hit('short', 50);
      const deadline = Date.now() + 2000;
      let h = await store.hit('short', 50);
      while (h.count !== 1 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
        h = await store.hit('short', 50);
      }
      assert.equal(h.count, 1);
    });

    test('undo takes back one hit, never below zero, and never starts a window', async () => {
      await store.hit('u', 60_000);
      await store.hit('u', 60_000);
      await store.undo('u');
      assert.equal((await store.hit('u', 60_000)).count, 2, 'one of the two hits was taken back');
      await store.undo('u');
      await store.undo('u');
      await store.undo('u');
      assert.equal((await store.hit('u', 60_000)).count, 1, 'never below zero');
      await store.undo('never-hit');
      const fresh = await store.hit('never-hit', 60_000);
      assert.equal(fresh.count, 1, 'an undo before any hit leaves nothing behind');
      assert.ok(fresh.resetMs > 0 && fresh.resetMs <= 60_000, `the window still ends: ${fresh.resetMs}`);
    });

    test('peek reads the window without spending, and never starts one', async () => {
      assert.deepEqual(await store.peek('p'), { count: 0, resetMs: 0 });
      await store.hit('p', 60_000);
      await store.hit('p', 60_000);
      const seen = await store.peek('p');
      assert.equal(seen.count, 2);
      assert.ok(seen.resetMs > 0 && seen.resetMs <= 60_000, `resetMs ${seen.resetMs}`);
      assert.equal((await store.peek('p')).count, 2, 'peeking twice spends nothing');
      assert.equal((await store.hit('p', 60_000)).count, 3);
      assert.equal((await store.hit('unpeeked', 60_000)).count, 1);
    });

    test('concurrent hits are all counted exactly once', async () => {
      const hits = await Promise.all(Array.from({ length: 50 }, () => store.hit('burst', 60_000)));
      assert.deepEqual(
        hits.map((h) => h.count).sort((x, y) => x - y),
        Array.from({ length: 50 }, (_, i) => i + 1),
      );
    });
  });
}

test('redis store fails fast when redis is unreachable', async () => {
  const store = await createRedisRateStore('redis://127.0.0.1:1', pino({ level: 'silent' }), 'sluice:test:');
  const t = Date.now();
  await assert.rejects(store.hit('x', 1000));
  assert.ok(Date.now() - t < 2000, 'no hang');
  await store.close();
});

test('redis store: an answer that came while this process was stalled is taken, not counted as an outage', async () => {
  let errors = 0;
  const store = await createRedisRateStore(REDIS_URL, pino({ level: 'silent' }), `sluice:test:${randomBytes(4).toString('hex')}:`, () => errors++);
  try {
    await store.hit('warm', 60_000);
    for (let i = 0; i < 5; i++) {
      const pending = store.hit('stalled', 60_000);
      // Hold the event loop well past the wait for an answer, as a long GC pause or a starved CPU does:
      // at once (the command not yet written) and from an immediate queued after ioredis's write (the
      // answer in the socket by the end).
      const stall = (): void => {
        const until = Date.now() + 600;
        while (Date.now() < until);
      };
      if (i % 2 === 0) stall();
      else await new Promise<void>((r) => setImmediate(() => (stall(), r())));
      assert.equal((await pending).count, i + 1);
    }
    assert.equal(errors, 0);
  } finally {
    await store.close();
  }
});
