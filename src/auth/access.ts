import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Ctx } from '../http/context.ts';
import type { Access, Caller } from '../routes/deps.ts';
import type { RateStore } from '../state/rate-store.ts';
import { clientIp, createIpMatcher } from '../http/client-ip.ts';
import { AppError } from '../errors.ts';

const HOUR_MS = 3_600_000;

/**
 * Who is calling and how much they may do: resolves the caller, counts the request against its
 * hourly budget (one atomic store round trip) and sets the X-RateLimit headers on the reply.
 * Until API keys exist every caller is anonymous, so a Bearer value is never an active key.
 *
 * When the store (Redis) cannot answer, requests are let through (fail open) and the outage is
 * logged: a rate-limit outage must not take uploads and downloads down with it.
 */
export function createAccess(deps: { config: Config; store: RateStore; log: Logger }): Access {
  const { config, store, log } = deps;
  const trusted = createIpMatcher(config.trustProxy);
  const anonymous = { apiKeyId: null, maxBundleBytes: config.anonMaxBundleBytes, expiryDays: config.anonExpiryDays };
  let lastWarn = 0;

  const ipOf = (ctx: Ctx): string => clientIp(ctx.remoteIp, ctx.headers['x-forwarded-for'], trusted);

  return {
    ipOf,
    async admit(ctx): Promise<Caller> {
      const limit = config.rateLimitAnonPerHour;
      const bearer = /^bearer\s+(\S+)\s*$/i.exec(ctx.headers.authorization ?? '')?.[1];
      const caller: Caller = { ip: ipOf(ctx), uploader: anonymous, bearerRejected: bearer !== undefined };
      let remaining = limit;
      try {
        const hit = await store.hit(`ip:${caller.ip}`, HOUR_MS);
        remaining = Math.max(0, limit - hit.count);
        if (hit.count > limit) {
          ctx.replyHeaders.push(
            ['X-RateLimit-Limit', String(limit)],
            ['X-RateLimit-Remaining', '0'],
            ['Retry-After', String(Math.max(1, Math.ceil(hit.resetMs / 1000)))],
          );
          throw new AppError('RATE_LIMITED');
        }
      } catch (err) {
        if (err instanceof AppError) throw err;
        if (Date.now() - lastWarn > 10_000) {
          lastWarn = Date.now();
          log.error({ err: (err as Error).message, store: store.kind }, 'rate limit store unavailable: failing open');
        }
      }
      ctx.replyHeaders.push(['X-RateLimit-Limit', String(limit)], ['X-RateLimit-Remaining', String(remaining)]);
      return caller;
    },
    uploaderFor(caller) {
      if (caller.bearerRejected) throw new AppError('INVALID_API_KEY');
      return caller.uploader;
    },
  };
}
