import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLimiter, eachLimited } from '../src/util/limit.ts';
import { cardSvg, expiryText } from '../src/thumbs/og-card.ts';
import { humanSize } from '../src/util/html.ts';
import { AppError } from '../src/errors.ts';

test('limiter: at most `max` jobs run, `queue` wait, the rest get 503 at once', async () => {
  const limiter = createLimiter({ max: 2, queue: 1 });
  let running = 0;
  let peak = 0;
  const gates: Array<() => void> = [];
  const job = (): Promise<void> =>
    limiter.run(async () => {
      peak = Math.max(peak, ++running);
      await new Promise<void>((r) => gates.push(r));
      running--;
    });
  const jobs = [job(), job(), job()];
  await assert.rejects(job(), (e: unknown) => e instanceof AppError && e.status === 503);
  assert.deepEqual(limiter.load(), { running: 2, waiting: 1 });
  while (gates.length || limiter.load().running) {
    gates.shift()?.();
    await new Promise((r) => setImmediate(r));
  }
  await Promise.all(jobs);
  assert.equal(peak, 2);
  assert.deepEqual(limiter.load(), { running: 0, waiting: 0 });
});

test('limiter: a failing job frees its slot', async () => {
  const limiter = createLimiter({ max: 1, queue: 0 });
  await assert.rejects(limiter.run(() => Promise.reject(new Error('boom'))), /boom/);
  assert.equal(await limiter.run(async () => 7), 7);
});

test('eachLimited: every item, at most n at once; after a failure no new call starts, and it rejects once the others settle', async () => {
  let running = 0;
  let most = 0;
  const seen: number[] = [];
  const job = async (i: number) => {
    running++;
    most = Math.max(most, running);
    seen.push(i);
    await new Promise((r) => setTimeout(r, i % 3));
    running--;
  };
  await eachLimited(Array.from({ length: 20 }, (_, i) => i), 3, job);
  assert.deepEqual([...seen].sort((a, b) => a - b), Array.from({ length: 20 }, (_, i) => i));
  assert.equal(most, 3);

  const started: number[] = [];
  let settled = 0;
  await assert.rejects(
    eachLimited([0, 1, 2, 3, 4, 5], 2, async (i) => {
      started.push(i);
      if (i === 1) throw new Error('one failed');
      await new Promise((r) => setTimeout(r, 20));
      settled++;
    }),
    /one failed/,
  );
  assert.deepEqual(started, [0, 1], 'nothing started after the failure');
  assert.equal(settled, 1, 'the call in flight settled before the rejection');
  await eachLimited([], 4, () => Promise.reject(new Error('never called')));
});

test('card text: sizes, expiry wording, XML escaping', () => {
  assert.equal(humanSize(0), '0 B');
  assert.equal(humanSize(1), '1 B');
  assert.equal(humanSize(1536), '1.5 KB');
  assert.equal(humanSize(250 * 1024 ** 2), '250 MB');
  const now = Date.UTC(2025, 0, 1);
  assert.equal(expiryText(null, now), 'never expires');
  assert.equal(expiryText(new Date(now + 30 * 60_000), now), 'expires in 30 minutes');
  assert.equal(expiryText(new Date(now + 3_600_000), now), 'expires in 1 hour');
  assert.equal(expiryText(new Date(now + 2.5 * 86_400_000), now), 'expires in 2 days');
  assert.equal(expiryText(new Date(now + 90 * 86_400_000), now), 'expires on 2025-04-01');
  const svg = cardSvg({ files: '<script>&"x"', size: "1 'KB'", expiry: 'never expires' });
  assert.doesNotMatch(svg, /<script>|&"|'KB'/);
  assert.match(svg, /&#60;script&#62;&#38;&#34;x&#34;/);
});
