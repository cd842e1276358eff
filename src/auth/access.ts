import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Sql } from '../db/client.ts';
import type { Ctx } from '../http/context.ts';
import type { Access, Caller, Uploader } from '../routes/deps.ts';
import type { RateStore } from '../state/rate-store.ts';
import type { Signer } from './signing.ts';
import { clientIp, createIpMatcher } from '../http/client-ip.ts';
import { AppError } from '../errors.ts';
import { createUsageRecorder, findApiKey } from './api-keys.ts';
import { PLANS } from './plans.ts';
import { UPLOAD_TOKEN_RE } from './tokens.ts';

const HOUR_MS = 3_600_000;

/**
 * Who is calling and what they may do. `admit` resolves the caller (anonymous by IP, or an API
 * key), spends one request of its hourly budget in one atomic store round trip, and sets the
 * X-RateLimit headers; `admitWithin` counts a request against a bound of its own instead (the
 * requests within one tus upload) and states the hourly budget unspent. `canRead` is the one
 * password gate every content path asks.
 *
 * When the store (Redis) cannot answer, requests are let through (fail open) and the outage is
 * logged: a rate-limit outage must not take uploads and downloads down with it.
 */
export function createAccess(deps: { config: Config; sql: Sql; store: RateStore; signer: Signer; log: Logger }): Access {
  const { config, sql, store, signer, log } = deps;
  const trusted = createIpMatcher(config.trustProxy);
  const anonymous: Uploader = { apiKeyId: null, maxBundleBytes: config.anonMaxBundleBytes, expiryDays: config.anonExpiryDays };
  const callers = new WeakMap<Ctx, Caller>();
  const recordUse = createUsageRecorder(sql, (err) => log.warn({ err }, 'last_used_at not recorded'));
  let lastWarn = 0;

  const ipOf = (ctx: Ctx): string => clientIp(ctx.remoteIp, ctx.headers['x-forwarded-for'], trusted);

  async function resolve(ctx: Ctx): Promise<Caller> {
    const ip = ipOf(ctx);
    const auth = ctx.headers.authorization ?? '';
    // Another scheme (or none) is not a key at all; a Bearer without exactly one value (`Bearer `,
    // `Bearer a b`) is a key that is not valid: refused on uploads and /my/* like any other.
    if (!/^bearer(\s|$)/i.test(auth)) return { ip, uploader: anonymous, apiKey: null, bearerRejected: false };
    const bearer = /^bearer\s+(\S+)\s*$/i.exec(auth)?.[1];
    if (bearer === undefined) return { ip, uploader: anonymous, apiKey: null, bearerRejected: true };
    // A 64-hex Bearer is an upload token (DELETE /api/v1/file reads it itself): never a key, so
    // no lookup; like any other non-key it is refused on uploads and /my/* and ignored elsewhere.
    const key = UPLOAD_TOKEN_RE.test(bearer) ? undefined : await findApiKey(sql, bearer);
    if (!key || key.state !== 'active') return { ip, uploader: anonymous, apiKey: null, bearerRejected: true };
    recordUse(key.id);
    const plan = PLANS[key.plan];
    return {
      ip,
      apiKey: key,
      bearerRejected: false,
      uploader: { apiKeyId: key.id, maxBundleBytes: plan.maxBundleBytes, expiryDays: plan.expiryDays },
    };
  }

  /** The caller's hourly bucket and its limit. */
  const budgetOf = (caller: Caller): [string, number] =>
    caller.apiKey
      ? [`key:${Buffer.from(caller.apiKey.key_hash).subarray(0, 12).toString('hex')}`, PLANS[caller.apiKey.plan].requestsPerHour]
      : [`ip:${caller.ip}`, config.rateLimitAnonPerHour];
  const storeDown = (err: unknown): void => {
    if (Date.now() - lastWarn > 10_000) {
      lastWarn = Date.now();
      log.error({ err: (err as Error).message, store: store.kind }, 'rate limit store unavailable: failing open');
    }
  };

  async function resolveFor(ctx: Ctx): Promise<Caller> {
    try {
      const caller = await resolve(ctx);
      callers.set(ctx, caller);
      return caller;
    } catch (err) {
      // The database could not say who this is; the reply still states the anonymous budget.
      ctx.replyHeaders.push(['X-RateLimit-Limit', String(config.rateLimitAnonPerHour)], ['X-RateLimit-Remaining', String(config.rateLimitAnonPerHour)]);
      throw err;
    }
  }

  /**
   * Counts one request: `spend` says how (and whether it was over its limit, then with the window's
   * time left); the reply states the hourly budget either way.
   */
  type Spend = (bucket: string, limit: number) => Promise<{ used: number; over: number | null; message?: string }>;
  async function count(ctx: Ctx, caller: Caller, spend: Spend): Promise<Caller> {
    const [bucket, limit] = budgetOf(caller);
    let remaining = limit;
    try {
      const r = await spend(bucket, limit);
      remaining = Math.max(0, limit - r.used);
      if (r.over !== null) {
        ctx.replyHeaders.push(
          ['X-RateLimit-Limit', String(limit)],
          ['X-RateLimit-Remaining', String(remaining)],
          ['Retry-After', String(Math.max(1, Math.ceil(r.over / 1000)))],
        );
        throw new AppError('RATE_LIMITED', r.message);
      }
    } catch (err) {
      if (err instanceof AppError) throw err;
      storeDown(err);
    }
    ctx.replyHeaders.push(['X-RateLimit-Limit', String(limit)], ['X-RateLimit-Remaining', String(remaining)]);
    return caller;
  }

  return {
    ipOf,
    async admit(ctx) {
      return count(ctx, await resolveFor(ctx), async (bucket, limit) => {
        const hit = await store.hit(bucket, HOUR_MS);
        return { used: hit.count, over: hit.count > limit ? hit.resetMs : null };
      });
    },
    async admitWithin(ctx, scope, bound, windowMs) {
      return count(ctx, await resolveFor(ctx), async (bucket) => {
        const [hourly, own] = await Promise.all([store.peek(bucket), store.hit(`within:${scope}`, windowMs)]);
        const over = own.count > bound ? own.resetMs : null;
        return { used: hourly.count, over, message: `This upload has used its ${bound} requests` };
      });
    },
    async callerOf(ctx) {
      return callers.get(ctx) ?? (await resolve(ctx));
    },
    uploaderFor(caller) {
      if (caller.bearerRejected) throw new AppError('INVALID_API_KEY');
      return caller.uploader;
    },
    requireKey(caller) {
      if (!caller.apiKey) throw new AppError('INVALID_API_KEY');
      return caller.apiKey;
    },
    canRead(ctx, caller, bundle) {
      if (bundle.access_password_hash === null) return true;
      if (caller.apiKey !== null && bundle.api_key_id === caller.apiKey.id) return true;
      const token = ctx.headers['x-access-token'] ?? ctx.query.get('t');
      return token !== undefined && token !== null && signer.verifyAccessToken(token, bundle.id, caller.ip);
    },
  };
}
