import type { Config } from '../config.ts';
import type { Ctx } from '../http/context.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { overBudget, type Budgets } from '../state/budget.ts';

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;

/**
 * The budget of the web content paths (share and manage pages, /d/, previews, /zip/, cards), per
 * client address, apart from the API budget. Two counts: requests per minute, generous enough for
 * a download manager's parallel ranges or a page full of previews; and misses (answers 404) per
 * hour, tight, since guessing codes or walking file ids is what produces them. Past the miss
 * budget every content path is refused, not only further misses: a 429 for misses beside a 200
 * for hits would still tell an enumerator which guesses exist.
 */
export interface ContentBudget {
  /** Spends one content request of the caller's address; throws RATE_LIMITED over either budget. */
  admit(ctx: Ctx): Promise<void>;
  /** The request was answered 404: one miss spent. */
  missed(ctx: Ctx): void;
}

export function createContentBudget(deps: {
  config: Pick<Config, 'rateLimitContentPerMinute' | 'rateLimitContentMissesPerHour'>;
  budgets: Budgets;
  /** The client's address as budgets see it (Access.ipOf). */
  ipOf: (ctx: Ctx) => string;
  metrics?: Metrics;
}): ContentBudget {
  const { budgets, ipOf, metrics } = deps;
  const limit = deps.config.rateLimitContentPerMinute;
  const missLimit = deps.config.rateLimitContentMissesPerHour;
  return {
    async admit(ctx) {
      const ip = ipOf(ctx);
      // Both in one event-loop turn: with Redis, one pipelined round trip.
      const [hit, misses] = await Promise.all([budgets.spend(`content:${ip}`, MINUTE_MS), budgets.peek(`miss:${ip}`)]);
      if (misses && misses.count >= missLimit) {
        metrics?.contentRefused('misses');
        overBudget(ctx, missLimit, misses, 'Too many requests for missing content from this address; try again later');
      }
      if (hit && hit.count > limit) {
        metrics?.contentRefused('requests');
        overBudget(ctx, limit, hit);
      }
    },
    missed(ctx) {
      metrics?.contentMiss();
      void budgets.spend(`miss:${ipOf(ctx)}`, HOUR_MS);
    },
  };
}
