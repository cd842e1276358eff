/** The S3 store's part-buffer pool: one budget for the parts being filled and those uploading. */
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { createPartPool, IDLE_RELEASE_MS, PAST_BUDGET_AFTER_MS } from '../src/storage/s3/part-pool.ts';

const MIB = 1024 * 1024;

test('the budget counts every buffer out; a waiter is told when one comes back or its time is up', () => {
  mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  try {
    const pool = createPartPool(16 * MIB);
    assert.equal(pool.mayTake(6 * MIB, null), true, 'nothing out: always');
    const a = pool.take(6 * MIB);
    const b = pool.take(6 * MIB);
    assert.equal(pool.mayTake(6 * MIB, null), false, '18 MiB would pass 16');
    const since = Date.now();
    let woken = 0;
    pool.onFree(() => woken++);
    pool.give(a, a.length);
    assert.equal(woken, 1, 'a buffer back wakes the waiter');
    assert.equal(pool.mayTake(6 * MIB, since), true);
    assert.equal(pool.take(6 * MIB), a, 'the buffer is reused');
    assert.equal(pool.mayTake(6 * MIB, since), false);
    pool.onFree(() => woken++);
    mock.timers.tick(PAST_BUDGET_AFTER_MS);
    assert.ok(woken >= 2, 'the timer wakes it while nothing comes back');
    assert.equal(pool.mayTake(6 * MIB, since), true, 'after the wait, past the budget');
    assert.equal(pool.mayTake(6 * MIB, Date.now()), false, 'a fresh waiter still waits');
    pool.give(b, b.length);
    pool.give(a, a.length);
    assert.equal(pool.mayTake(16 * MIB, null), true);
    assert.equal(pool.mayTake(17 * MIB, null), true, 'a part larger than the budget when nothing is out');
  } finally {
    mock.timers.reset();
  }
});

test('two parts of any size fit whatever the budget: one fills while the other uploads, and comes back for reuse', () => {
  const pool = createPartPool(24 * MIB);
  const uploading = pool.take(16 * MIB);
  assert.equal(pool.mayTake(16 * MIB, null), true, '32 MiB of 16 MiB parts pass a 24 MiB budget');
  const filling = pool.take(16 * MIB);
  assert.equal(pool.mayTake(16 * MIB, null), false, 'a third does not');
  pool.give(uploading, uploading.length);
  assert.equal(pool.take(16 * MIB), uploading, 'the buffer back is kept and reused');
  pool.give(filling, filling.length);
  assert.equal(pool.mayTake(6 * MIB, null), true);
});

test('spares stay while uploads follow each other and go once the pool has been idle a while; a failed part\'s is left to the GC', () => {
  mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  try {
    let released = 0;
    const pool = createPartPool(24 * MIB, () => released++);
    const a = pool.take(6 * MIB);
    const b = pool.take(6 * MIB);
    const c = pool.take(6 * MIB);
    a.fill(1);
    c.fill(3);
    pool.give(a, a.length);
    assert.equal(a.length, 6 * MIB, 'kept for reuse: with the 12 MiB still out, it fits the budget');
    pool.drop(c);
    assert.equal(c.length, 6 * MIB, 'a failed part\'s request may still read it: untouched');
    assert.equal(c[0], 3);
    pool.give(b, b.length);
    assert.equal(b.length, 6 * MIB, 'nothing out: the last one back is kept too');
    mock.timers.tick(IDLE_RELEASE_MS / 2);
    const again = pool.take(6 * MIB);
    assert.ok(again === a || again === b, 'the next upload within the wait reuses a spare');
    mock.timers.tick(IDLE_RELEASE_MS);
    assert.ok(a.length + b.length === 12 * MIB, 'none goes while a buffer is out');
    pool.give(again, again.length);
    mock.timers.tick(IDLE_RELEASE_MS - 1);
    assert.ok(a.length + b.length === 12 * MIB, 'the wait starts again when the pool is idle again');
    assert.equal(released, 0);
    mock.timers.tick(1);
    assert.equal(released, 1, 'idle long enough: the spares go, and the garbage of the uploads is collected');
    assert.equal(b.length, 0, 'unmapped');
    assert.equal(a.length, 0);

    const d = pool.take(6 * MIB);
    assert.notEqual(d, a, 'a fresh mapping after the release');
    assert.equal(d.length, 6 * MIB);
    const more = [pool.take(6 * MIB), pool.take(6 * MIB), pool.take(6 * MIB), pool.take(6 * MIB)]; // the last past the budget, as a writer that waited long enough takes it
    d.fill(4);
    pool.give(d, d.length);
    assert.equal(d.length, 0, 'with 24 MiB still out, one more does not fit: unmapped at once');
    for (const x of more) pool.give(x, x.length);
    assert.ok(more.every((x) => x.length === 6 * MIB), 'as they come back, the budget\'s worth stays');
    mock.timers.tick(IDLE_RELEASE_MS);
    assert.ok(more.every((x) => x.length === 0));

    // A buffer filled less than halfway (a small object's part) is left to the GC: shrinking makes V8
    // zero it, which would fault in pages that were never used. A short last part is unmapped.
    const small = pool.take(6 * MIB);
    small.fill(5, 0, 64 * 1024);
    pool.give(small, 64 * 1024);
    mock.timers.tick(IDLE_RELEASE_MS);
    assert.equal(small.length, 6 * MIB, 'not unmapped');
    const last = pool.take(6 * MIB);
    pool.give(last, 4 * MIB);
    mock.timers.tick(IDLE_RELEASE_MS);
    assert.equal(last.length, 0, 'two thirds used: unmapped');
    assert.equal(released, 4);
  } finally {
    mock.timers.reset();
  }
});
