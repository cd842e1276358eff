import type { Ctx } from '../http/context.ts';
import { sendJson } from '../http/reply.ts';
import { readSmallBody } from '../http/body-in.ts';
import type { Route } from '../http/server.ts';
import { AppError } from '../errors.ts';
import { SHORT_CODE_RE } from '../util/tokens.ts';
import { checkVanity, vanityPlan, vanityUrl } from '../bundles/vanity.ts';
import { claimVanity, findOwnedLiveBundle, releaseVanity } from '../db/vanity.ts';
import type { Deps } from '../deps.ts';
import { mayChange } from '../bundles/guard.ts';

/**
 * PUT|DELETE /api/v1/my/bundles/<code>/vanity: names (or un-names) one of the key's live bundles.
 * PUT takes JSON `{"vanity":"name"}`; giving a bundle the name it already has is a success.
 */
export function vanityRoutes(deps: Deps): Route[] {
  return [
    { method: 'put', pattern: '/api/v1/my/bundles/:code/vanity', handler: (ctx) => putVanity(ctx, deps) },
    { method: 'del', pattern: '/api/v1/my/bundles/:code/vanity', handler: (ctx) => deleteVanity(ctx, deps) },
  ];
}

/** The caller's live bundle named by the path; NOT_OWNER (404) for anyone else's, as DELETE /my/bundles does. */
async function ownBundle(ctx: Ctx, deps: Deps, keyId: number): Promise<{ id: number; short_code: string }> {
  const code = ctx.params[0] ?? '';
  if (!SHORT_CODE_RE.test(code)) throw new AppError('INVALID_SHORT_CODE');
  const b = await findOwnedLiveBundle(deps.sql, code, keyId);
  if (!b) throw new AppError('NOT_OWNER');
  return b;
}

async function putVanity(ctx: Ctx, deps: Deps): Promise<void> {
  // The body reader is registered before the first await (the server admitted the request already).
  const body = readSmallBody(ctx, 4096);
  body.catch(() => {}); // awaited below; if the plan check throws first, its rejection is moot
  const caller = await deps.access.callerOf(ctx);
  // The plan is checked before the body, so a key of another plan learns 403 whatever it sent.
  vanityPlan(caller);
  let name: unknown;
  try {
    const v: unknown = JSON.parse((await body).toString('utf8'));
    name = v !== null && typeof v === 'object' ? (v as Record<string, unknown>).vanity : undefined;
  } catch {
    throw new AppError('INVALID_JSON');
  }
  if (typeof name !== 'string') throw new AppError('INVALID_VANITY');
  checkVanity(name, caller, deps.reservedNames);
  const b = await ownBundle(ctx, deps, caller.apiKey!.id);
  if (!(await claimVanity(deps.sql, b.id, name, mayChange('rename', 'owner')))) throw new AppError('NOT_OWNER');
  deps.bundles.invalidate(b.id);
  sendJson(ctx, 200, { success: true, short_code: b.short_code, share_url: `/${b.short_code}`, vanity_url: vanityUrl(name) });
}

async function deleteVanity(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const b = await ownBundle(ctx, deps, key.id);
  await releaseVanity(deps.sql, b.id, mayChange('rename', 'owner'));
  deps.bundles.invalidate(b.id);
  sendJson(ctx, 200, { success: true, short_code: b.short_code, vanity_url: null });
}
