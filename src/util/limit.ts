import { AppError } from '../errors.ts';

export interface Limiter {
  /** Runs `job` when a slot is free; throws UNAVAILABLE (503) at once when the queue is full. */
  run<T>(job: () => Promise<T>): Promise<T>;
  /** Jobs running and waiting, for tests and logs. */
  readonly load: () => { running: number; waiting: number };
}

/**
 * A counting semaphore with a bounded wait queue. Image work is CPU and memory heavy: a burst of
 * preview requests must queue a little, then be turned away, never pile up without bound.
 */
export function createLimiter(opts: { max: number; queue: number }): Limiter {
  let running = 0;
  const waiting: Array<() => void> = [];

  const release = (): void => {
    const next = waiting.shift();
    if (next) next(); // the slot passes straight to the next job: `running` stays the same
    else running--;
  };

  return {
    async run(job) {
      if (running >= opts.max) {
        if (waiting.length >= opts.queue) throw new AppError('UNAVAILABLE', 'Too many image jobs in progress; retry shortly');
        await new Promise<void>((resolve) => waiting.push(resolve));
      } else running++;
      try {
        return await job();
      } finally {
        release();
      }
    },
    load: () => ({ running, waiting: waiting.length }),
  };
}

/**
 * Runs `fn` on every item, at most `n` at once. Rejects with the first failure, once the calls
 * already started have settled; no new call starts after a failure. Removing a bundle of thousands
 * of files must not start thousands of store requests together: each holds memory until it ends.
 */
export async function eachLimited<T>(items: readonly T[], n: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  let failed: { err: unknown } | null = null;
  const worker = async (): Promise<void> => {
    while (failed === null && next < items.length) {
      const item = items[next++]!;
      try {
        await fn(item);
      } catch (err) {
        failed ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
  if (failed !== null) throw (failed as { err: unknown }).err;
}
