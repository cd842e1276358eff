import type { Logger } from 'pino';
import type { Ctx } from '../http/context.ts';
import { AppError } from '../errors.ts';
import type { Hit, RateStore } from './rate-store.ts';

/**
 * Request budgets on the shared rate store: the API budget, the content budget and the content
 * miss budget all count through here. When the store (Redis) cannot answer, requests are let
 * through (fail open): a rate-limit outage must not take uploads and downloads down with it. A miss
 * is logged as a warning, and as an error once the store has failed for OUTAGE_MS without answering.
 */
export interface Budgets {
  /** Spends one request of `key`'s window; null when the store cannot answer. */
  spend(key: string, windowMs: number): Promise<Hit | null>;
  /** The window's count without spending; null when the store cannot answer. */
  peek(key: string): Promise<Hit | null>;
}

/** How long the store must fail, with no answer in between, before a miss is an outage (error). */
const OUTAGE_MS = 5_000;
/** At most one line per level in this long. */
const LOG_EVERY_MS = 10_000;

export function createBudgets(deps: { store: RateStore; log: Logger }): Budgets {
  const { store, log } = deps;
  // A single late answer (a loaded machine) is a warning; only a store that keeps failing is an outage.
  let failingSince = 0;
  let lastWarn = 0;
  let lastError = 0;
  const storeDown = (err: unknown): null => {
    const now = Date.now();
    if (failingSince === 0) failingSince = now;
    const fields = { err: (err as Error).message, store: store.kind };
    if (now - failingSince >= OUTAGE_MS) {
      if (now - lastError > LOG_EVERY_MS) {
        lastError = now;
        log.error({ ...fields, failingForMs: now - failingSince }, 'rate limit store unavailable: failing open');
      }
    } else if (now - lastWarn > LOG_EVERY_MS) {
      lastWarn = now;
      log.warn(fields, 'rate limit store did not answer: request let through uncounted');
    }
    return null;
  };
  const answered = <T>(v: T): T => {
    if (failingSince !== 0) {
      if (lastError >= failingSince) log.info({ store: store.kind, failedForMs: Date.now() - failingSince }, 'rate limit store answering again');
      failingSince = 0;
    }
    return v;
  };
  return {
    spend: (key, windowMs) => store.hit(key, windowMs).then(answered, storeDown),
    peek: (key) => store.peek(key).then(answered, storeDown),
  };
}

/**
 * Refuses a request over its budget: 429 with the limit, what remains of it (nothing, unless the
 * bound crossed is another one) and Retry-After (seconds until the window resets), on whatever body
 * the route answers errors with.
 */
export function overBudget(ctx: Ctx, limit: number, hit: Hit, message?: string, remaining = 0): never {
  ctx.replyHeaders.push(
    ['X-RateLimit-Limit', String(limit)],
    ['X-RateLimit-Remaining', String(remaining)],
    ['Retry-After', String(Math.max(1, Math.ceil(hit.resetMs / 1000)))],
  );
  throw new AppError('RATE_LIMITED', message);
}
