import type { Logger } from 'pino';
import type { Ctx } from '../http/context.ts';
import { AppError } from '../errors.ts';
import type { Hit, RateStore } from './rate-store.ts';

/**
 * Request budgets on the shared rate store: the API budget, the content budget and the content
 * miss budget all count through here. When the store (Redis) cannot answer, requests are let
 * through (fail open) and the outage is logged: a rate-limit outage must not take uploads and
 * downloads down with it.
 */
export interface Budgets {
  /** Spends one request of `key`'s window; null when the store cannot answer. */
  spend(key: string, windowMs: number): Promise<Hit | null>;
  /** The window's count without spending; null when the store cannot answer. */
  peek(key: string): Promise<Hit | null>;
}

export function createBudgets(deps: { store: RateStore; log: Logger }): Budgets {
  const { store, log } = deps;
  let lastWarn = 0;
  const storeDown = (err: unknown): null => {
    if (Date.now() - lastWarn > 10_000) {
      lastWarn = Date.now();
      log.error({ err: (err as Error).message, store: store.kind }, 'rate limit store unavailable: failing open');
    }
    return null;
  };
  return {
    spend: (key, windowMs) => store.hit(key, windowMs).catch(storeDown),
    peek: (key) => store.peek(key).catch(storeDown),
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
