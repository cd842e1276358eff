import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Sql } from '../db/sql.ts';
import type { Ctx } from '../http/context.ts';
import type { Access, Caller, Uploader } from './caller.ts';
import type { Budgets } from '../state/budget.ts';
import { overBudget } from '../state/budget.ts';
import type { Signer } from './signing.ts';
import { budgetAddress, clientIp, createIpMatcher } from '../http/client-ip.ts';
import { AppError } from '../errors.ts';
import { createUsageRecorder, findApiKey } from './api-keys.ts';
import { PLANS } from '../plans.ts';
import { UPLOAD_TOKEN_RE } from '../util/tokens.ts';

const HOUR_MS = 3_600_000;

const inWords = (ms: number): string => {
  const s = Math.max(1, Math.ceil(ms / 1000));
  if (s < 120) return `${s} seconds`;
  return `${Math.ceil(s / 60)} minutes`;
};

/** The 429 of the hourly budget says what the budget is, when it resets, and how to get a bigger one. */
export function overBudgetText(caller: Caller, limit: number, resetMs: number): string {
  const head = `Rate limit exceeded: ${caller.apiKey ? `this API key's ${PLANS[caller.apiKey.plan].title} plan allows` : 'an address without an API key may make'} ${limit} requests an hour; the budget resets in ${inWords(resetMs)} (Retry-After gives the seconds).`;
  const bigger = Object.values(PLANS).filter((p) => p.requestsPerHour > limit).map((p) => p.requestsPerHour);
  if (bigger.length === 0) return `${head} No plan allows more.`;
  return `${head} ${caller.apiKey ? 'A larger plan' : 'An API key'} allows ${Math.min(...bigger)} or more: see /api-keys.`;
}

/**
 * Who is calling and what they may do. `admit` resolves the caller (anonymous by IP, or an API
 * key), spends one request of its hourly budget in one atomic store round trip, and sets the
 * X-RateLimit headers; `admitWithin` counts a request against a bound of its own instead (the
 * requests within one tus upload) and states the hourly budget unspent. `canRead` is the one
 * password gate every content path asks.
 *
 * A store that cannot answer lets requests through (state/budget.ts).
 */
export function createAccess(deps: { config: Config; sql: Sql; budgets: Budgets; signer: Signer; log: Logger }): Access {
  const { config, sql, budgets, signer, log } = deps;
  const trusted = createIpMatcher(config.trustProxy);
  const anonymous: Uploader = { apiKeyId: null, maxBundleBytes: config.anonMaxBundleBytes, expiryDays: config.anonExpiryDays };
  const recordUse = createUsageRecorder(sql, (err) => log.warn({ err }, 'last_used_at not recorded'));

  // An IPv6 client is its /64 here: for every budget, the password throttle and access tokens.
  const ipOf = (ctx: Ctx): string => budgetAddress(clientIp(ctx.remoteIp, ctx.headers['x-forwarded-for'], trusted));

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

  async function resolveFor(ctx: Ctx): Promise<Caller> {
    try {
      const caller = await resolve(ctx);
      ctx.caller = caller;
      return caller;
    } catch (err) {
      // The database could not say who this is; the reply still states the anonymous budget.
      ctx.replyHeaders.push(['X-RateLimit-Limit', String(config.rateLimitAnonPerHour)], ['X-RateLimit-Remaining', String(config.rateLimitAnonPerHour)]);
      throw err;
    }
  }

  const stateBudget = (ctx: Ctx, limit: number, remaining: number): void => {
    ctx.replyHeaders.push(['X-RateLimit-Limit', String(limit)], ['X-RateLimit-Remaining', String(remaining)]);
  };

  return {
    ipOf,
    async admit(ctx) {
      const caller = await resolveFor(ctx);
      const [bucket, limit] = budgetOf(caller);
      const hit = await budgets.spend(bucket, HOUR_MS);
      if (hit && hit.count > limit) overBudget(ctx, limit, hit, overBudgetText(caller, limit, hit.resetMs));
      stateBudget(ctx, limit, hit ? Math.max(0, limit - hit.count) : limit);
      return caller;
    },
    async admitWithin(ctx, scope, bound, windowMs) {
      const caller = await resolveFor(ctx);
      const [bucket, limit] = budgetOf(caller);
      const [hourly, own] = await Promise.all([budgets.peek(bucket), budgets.spend(`within:${scope}`, windowMs)]);
      const remaining = hourly ? Math.max(0, limit - hourly.count) : limit;
      // Over the upload's own bound: refused, while the reply still states the hourly budget, unspent.
      if (own && own.count > bound) overBudget(ctx, limit, own, `This upload has used its ${bound} requests`, remaining);
      stateBudget(ctx, limit, remaining);
      return caller;
    },
    async callerOf(ctx) {
      // The server's admission stored what admit() above resolved for this request.
      return (ctx.caller as Caller | undefined) ?? (await resolve(ctx));
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
