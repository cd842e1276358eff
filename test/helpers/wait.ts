import assert from 'node:assert/strict';

const POLL_MS = 25;

/**
 * Polls `cond` until it returns a truthy value (which is returned) or `ms` pass. A throw counts as "not
 * yet" (a server restarting refuses connections); the last one is named if time runs out. The
 * default deadline is generous: a passing wait ends at its event, and a busy 2-core CI machine
 * (or the S3 pass, where each poll lists a bucket) can take seconds for what takes milliseconds here.
 */
export async function waitFor<T>(what: string, cond: () => T | Promise<T>, ms = 20_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) assert.fail(`timed out after ${ms} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
