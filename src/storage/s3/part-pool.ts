import { pageAligned, unmapNow } from '../../util/spare-buffers.ts';

/**
 * How long a writer waits for a part buffer before it takes one past the budget: buffers of fast
 * uploads come back within a part's upload, so only a budget held by clients that send slowly
 * makes anyone wait this long, and they must not stall every other upload of the node.
 */
export const PAST_BUDGET_AFTER_MS = 2000;

/**
 * Part buffers shared by every writer and append of a store, bounded in bytes together with the
 * parts being filled: a buffer is reused once its part is uploaded (no garbage to wait for), and a
 * writer that needs one while the budget is spent holds its caller's chunk, answers false to
 * write() (its body pauses) and waits until a part upload gives one back, or PAST_BUDGET_AFTER_MS.
 */
export interface PartPool {
  take(size: number): Buffer;
  /**
   * A buffer whose part was uploaded, or never sent: nothing reads it any more. `used`: the bytes
   * written into it this time (a short last part, a small object's bytes, copied out).
   */
  give(buf: Buffer, used: number): void;
  /** A buffer whose part upload failed: its request may still be writing it, so it is never reused, and only the GC frees it. */
  drop(buf: Buffer): void;
  /** Whether `size` more bytes fit in the budget (or none are out), or a writer waiting since `since` (ms) has waited long enough. */
  mayTake(size: number, since: number | null): boolean;
  /** Runs `fn` once, when a buffer comes back or a waiter's time may be up. */
  onFree(fn: () => void): void;
}

/**
 * How long the pool keeps its spare buffers once no upload holds one: a script's next upload then
 * fills buffers already in memory. A fresh buffer costs a page fault per 4 KiB, which on some
 * virtual machines costs more CPU than the upload's copy and signing of the same bytes.
 */
export const IDLE_RELEASE_MS = 60_000;

/**
 * Buffers are page-aligned mappings, and one the pool does not keep goes back to the system at once
 * (unmapNow) once at least half of it has been filled: waiting for the GC held the spares of the
 * last upload beside the fresh ones of the next, two budgets at once. One filled less (a small
 * object's part) is left to the GC: few of its pages are resident, and V8 zeroes a buffer it
 * shrinks, which would fault in the rest. Spares, up to the budget, stay until the pool has been
 * idle (no buffer out) for IDLE_RELEASE_MS; `released` is called once they are let go, for the
 * garbage the uploads left besides: a full collection after every upload cost about as much CPU as
 * the fresh buffers.
 */
export function createPartPool(budget: number, released: () => void = () => {}): PartPool {
  // Two parts of any size fit, whatever the budget: an upload past its 5,000th part (16 MiB parts)
  // fills one while the other uploads, instead of waiting for each upload and allocating afresh.
  const room = (size: number): number => Math.max(budget, 2 * size);
  const free: Buffer[] = [];
  let out = 0;
  /** The most bytes ever written into each buffer: about how much of it is resident. */
  const touched = new WeakMap<Buffer, number>();
  const letGo = (buf: Buffer): void => {
    if ((touched.get(buf) ?? 0) * 2 >= buf.length) unmapNow(buf);
  };
  /** Runs IDLE_RELEASE_MS after the pool last had no buffer out; a buffer out since then keeps the spares. */
  let idleTimer: NodeJS.Timeout | null = null;
  const releaseIfIdle = (): void => {
    idleTimer = null;
    if (out > 0) return;
    for (const b of free.splice(0)) letGo(b);
    released();
  };
  /** After a buffer came back: waiters are told, and with none out any more the idle wait starts again. */
  const emptied = (): void => {
    if (out === 0) {
      if (idleTimer) clearTimeout(idleTimer);
      idleTimer = setTimeout(releaseIfIdle, IDLE_RELEASE_MS).unref();
    }
    wake();
  };
  let waiting: (() => void)[] = [];
  let timer: NodeJS.Timeout | null = null;
  const wake = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    const fns = waiting;
    waiting = [];
    for (const fn of fns) fn();
  };
  return {
    take(size) {
      out += size;
      const i = free.findIndex((b) => b.length === size);
      return i >= 0 ? free.splice(i, 1)[0]! : pageAligned(size);
    },
    give(buf, used) {
      out -= buf.length;
      touched.set(buf, Math.max(used, touched.get(buf) ?? 0));
      if (out + free.reduce((n, b) => n + b.length, 0) + buf.length <= room(buf.length)) free.push(buf);
      else letGo(buf);
      emptied();
    },
    drop(buf) {
      out -= buf.length;
      emptied();
    },
    mayTake: (size, since) => out === 0 || out + size <= room(size) || (since !== null && Date.now() - since >= PAST_BUDGET_AFTER_MS),
    onFree(fn) {
      waiting.push(fn);
      timer ??= setTimeout(wake, PAST_BUDGET_AFTER_MS / 4).unref();
    },
  };
}

/** Bytes taken and given back against a fixed budget; take() of what does not fit takes nothing. */
export interface ByteBudget {
  take(n: number): boolean;
  give(n: number): void;
}

export function createByteBudget(budget: number): ByteBudget {
  let used = 0;
  return {
    take(n) {
      if (used + n > budget) return false;
      used += n;
      return true;
    },
    give(n) {
      used -= n;
    },
  };
}
