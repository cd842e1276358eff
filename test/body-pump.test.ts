/**
 * streamBody's reused read buffers, driven without a server: a fake uWS response that takes every
 * chunk at once, and a source whose reads finish when the test says so.
 * What matters is when a buffer goes back: never while a read may still write into it.
 */
import { mock, test } from 'node:test';
import assert from 'node:assert/strict';
import { responseMemory, streamBody, TOTAL_BUDGET_BYTES, type BodySource } from '../src/http/body-pump.ts';
import { RELEASE_AFTER_MS } from '../src/http/client-waits.ts';
import type { Ctx } from '../src/http/context.ts';
import { freshAllocations } from '../src/util/spare-buffers.ts';

const MiB = 1 << 20;
const fresh = (): number => freshAllocations().get('download') ?? 0;

interface FakeCtx {
  ctx: Ctx;
  abort(): void;
  /** Bytes the fake response took. */
  sent(): number;
}

/** A response that accepts everything it is given; `abort` plays the client going away. */
function fakeCtx(): FakeCtx {
  let aborted: Array<() => void> = [];
  let sent = 0;
  const res = {
    cork: (fn: () => void) => fn(),
    writeStatus: () => res,
    writeHeader: () => res,
    getWriteOffset: () => sent,
    tryEnd: (chunk: ArrayBuffer | Uint8Array, total: number): [boolean, boolean] => {
      sent += chunk.byteLength;
      return [true, sent >= total];
    },
    onWritable: () => res,
    close: () => res,
    pause: () => res,
    resume: () => res,
  };
  const ctx = {
    res,
    aborted: false,
    done: false,
    status: 0,
    bytesOut: 0,
    replyHeaders: [],
    onAbort(fn: () => void) {
      if (ctx.aborted) fn();
      else aborted.push(fn);
    },
  };
  return {
    ctx: ctx as unknown as Ctx,
    abort() {
      ctx.aborted = true;
      const fns = aborted;
      aborted = [];
      for (const fn of fns) fn();
    },
    sent: () => sent,
  };
}

/** A source whose reads wait until `release()`; it records the buffers it was given. */
function gatedSource(): BodySource & { release(): void; targets: ArrayBuffer[]; pending(): number } {
  let waiting: Array<() => void> = [];
  const targets: ArrayBuffer[] = [];
  return {
    targets,
    pending: () => waiting.length,
    release() {
      const fns = waiting;
      waiting = [];
      for (const fn of fns) fn();
    },
    read(target) {
      targets.push(target.buffer as ArrayBuffer);
      return new Promise<void>((resolve) => waiting.push(() => resolve()));
    },
    close() {},
  };
}

/** A source that fills at once. */
const instantSource = (): BodySource & { targets: ArrayBuffer[] } => {
  const targets: ArrayBuffer[] = [];
  return {
    targets,
    read: async (target) => {
      targets.push(target.buffer as ArrayBuffer);
      target.fill(7);
    },
    close() {},
  };
};

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

test('an aborted response keeps its buffer out of the pool until its read in flight ends', async () => {
  // Warm the pool: one complete response returns its two buffers.
  const warm = fakeCtx();
  assert.equal(await streamBody(warm.ctx, 200, [], 3 * MiB, instantSource()), true);
  await tick();

  const a = fakeCtx();
  const src = gatedSource();
  const streaming = streamBody(a.ctx, 200, [], 8 * MiB, src);
  await tick();
  assert.equal(src.pending(), 1, 'the first read is in flight');
  const held = src.targets[0]!;
  a.abort();
  assert.equal(await streaming, false);

  // While that read can still write into its buffer, another response must not be handed it.
  const before = fresh();
  const b = instantSource();
  assert.equal(await streamBody(fakeCtx().ctx, 200, [], 3 * MiB, b), true);
  assert.ok(!b.targets.includes(held), 'a buffer with a read in flight was reused');
  await tick();

  // Once the read ends, the buffer is a spare again and the next response allocates nothing.
  src.release();
  await tick();
  const c = instantSource();
  const afterRelease = fresh();
  assert.equal(await streamBody(fakeCtx().ctx, 200, [], 3 * MiB, c), true);
  assert.equal(fresh(), afterRelease, 'no fresh buffer once the spares are back');
  assert.ok(fresh() - before <= 1, 'at most the one buffer kept out was replaced');
});

test('small bodies never take pooled buffers; every byte of a large one is sent', async () => {
  const small = instantSource();
  const f = fakeCtx();
  assert.equal(await streamBody(f.ctx, 200, [], 1000, small), true);
  assert.equal(f.sent(), 1000);
  assert.equal(small.targets[0]!.byteLength < MiB, true, 'a small body reads into a buffer of its own size');

  const big = fakeCtx();
  assert.equal(await streamBody(big.ctx, 200, [], 5 * MiB + 3, instantSource()), true);
  assert.equal(big.sent(), 5 * MiB + 3);
});

/** A response that takes nothing until `drain()`, then everything; `writable` is uWS's callback. */
function stalledCtx(): FakeCtx & { drain(): boolean; taken(): number } {
  let writable: ((offset: number) => boolean) | null = null;
  let taking = false;
  let sent = 0;
  const f = fakeCtx();
  const res = f.ctx.res as unknown as Record<string, unknown>;
  res.tryEnd = (chunk: Uint8Array, total: number): [boolean, boolean] => {
    if (!taking) return [false, false];
    sent += chunk.byteLength;
    return [true, sent >= total];
  };
  res.getWriteOffset = () => sent;
  res.onWritable = (fn: (offset: number) => boolean) => {
    writable = fn;
    return res;
  };
  return {
    ...f,
    taken: () => sent,
    drain() {
      taking = true;
      return writable!(sent);
    },
  };
}

/** Turns of the event loop until `cond` holds (each read and send settles within a few). */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 10_000 && !cond(); i++) await tick();
  assert.ok(cond(), what);
}

test('a response whose client takes nothing gives its buffers back after RELEASE_AFTER_MS, and resumes where the client is', async (t) => {
  t.mock.timers.enable({ apis: ['setInterval'] });
  const base = responseMemory().inUse;
  const f = stalledCtx();
  const src = instantSource();
  const streaming = streamBody(f.ctx, 200, [], 4 * MiB, src);
  await until(() => src.targets.length === 2, 'the first chunk and the one ahead are read');
  await tick();
  assert.equal(responseMemory().inUse - base, 2 * MiB, 'two buffers while the client is merely behind');
  // Waits are looked at twice a second: released within half a second past RELEASE_AFTER_MS.
  t.mock.timers.tick(RELEASE_AFTER_MS + 500);
  await until(() => responseMemory().inUse === base, 'none once it has waited RELEASE_AFTER_MS');
  // The client drains: nothing was sent, so the whole body is read again from its start.
  assert.equal(f.drain(), true);
  assert.equal(await streaming, true);
  assert.equal(f.taken(), 4 * MiB);
  assert.equal(src.targets.length, 2 + 4, 'the first two reads, then the four of the whole body');
  assert.equal(responseMemory().inUse, base);
  t.mock.timers.tick(500); // nothing waits: the sweep stops its (mocked) timer
});

test('clients that take nothing hold at most the budget, and give it up at once to a client that reads', async (t) => {
  // No sweep runs: only another response's need can take memory from the stalled ones.
  t.mock.timers.enable({ apis: ['setInterval'] });
  const crowd = Array.from({ length: TOTAL_BUDGET_BYTES / MiB + 16 }, () => ({ f: stalledCtx(), src: instantSource() }));
  const streams = crowd.map(({ f, src }) => streamBody(f.ctx, 200, [], 8 * MiB, src));
  await until(() => responseMemory().waiting === 0 && crowd.every(({ src }) => src.targets.length > 0), 'every response has read its first chunk');
  assert.ok(responseMemory().inUse <= TOTAL_BUDGET_BYTES, `${responseMemory().inUse} bytes held, past the budget`);

  const reader = fakeCtx();
  assert.equal(await streamBody(reader.ctx, 200, [], 6 * MiB, instantSource()), true, 'a reading client is served');
  assert.equal(reader.sent(), 6 * MiB);
  assert.ok(responseMemory().inUse <= TOTAL_BUDGET_BYTES);

  for (const { f } of crowd) f.abort();
  assert.deepEqual(await Promise.all(streams), crowd.map(() => false));
  await until(() => responseMemory().inUse === 0, 'all memory given back once the clients are gone');
  assert.equal(responseMemory().waiting, 0);
  t.mock.timers.tick(500); // nothing waits: the sweep stops its (mocked) timer
});
