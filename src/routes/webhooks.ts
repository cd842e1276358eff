import type { Ctx } from '../http/context.ts';
import { sendJson } from '../http/reply.ts';
import { jsonObject, readSmallBody } from '../http/body-in.ts';
import type { Route } from '../http/server.ts';
import { AppError } from '../errors.ts';
import { deleteWebhook, listAttempts, listWebhooks } from '../db/webhooks.ts';
import { registerWebhook } from '../notify/webhooks.ts';
import { isoUtc } from '../util/time.ts';
import type { Deps } from '../deps.ts';

/** A key's webhook endpoints (see docs/api.md, "Webhooks"). */
export function webhookRoutes(deps: Deps): Route[] {
  return [
    { method: 'post', pattern: '/api/v1/my/webhooks', handler: (ctx) => create(ctx, deps) },
    { method: 'get', pattern: '/api/v1/my/webhooks', handler: (ctx) => list(ctx, deps) },
    { method: 'del', pattern: '/api/v1/my/webhooks/:id', handler: (ctx) => remove(ctx, deps) },
    { method: 'get', pattern: '/api/v1/my/webhooks/:id/deliveries', handler: (ctx) => deliveries(ctx, deps) },
  ];
}

const idParam = (ctx: Ctx): number => {
  const raw = ctx.params[0] ?? '';
  if (!/^[1-9][0-9]{0,15}$/.test(raw)) throw new AppError('WEBHOOK_NOT_FOUND');
  return Number(raw);
};

async function create(ctx: Ctx, deps: Deps): Promise<void> {
  const body = readSmallBody(ctx, 8 * 1024);
  body.catch(() => {}); // awaited below; if the key is refused first, its rejection is moot
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const o = await jsonObject(body);
  const made = await registerWebhook({ sql: deps.sql, sealer: deps.webhookSealer, allowPrivate: deps.config.webhookAllowPrivate }, key.id, o);
  sendJson(ctx, 201, { success: true, webhook_id: made.id, secret: made.secret });
}

async function list(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const rows = await listWebhooks(deps.sql, key.id);
  sendJson(ctx, 200, {
    success: true,
    webhooks: rows.map((w) => ({ webhook_id: Number(w.id), url: w.url, events: w.events, created_at: isoUtc(w.created_at), disabled_reason: w.disabled_reason })),
  });
}

async function remove(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  if (!(await deleteWebhook(deps.sql, key.id, idParam(ctx)))) throw new AppError('WEBHOOK_NOT_FOUND');
  sendJson(ctx, 200, { success: true });
}

async function deliveries(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const rows = await listAttempts(deps.sql, key.id, idParam(ctx));
  if (!rows) throw new AppError('WEBHOOK_NOT_FOUND');
  sendJson(ctx, 200, {
    success: true,
    deliveries: rows.map((a) => ({ webhook_id_header: a.event_id, event: a.event, attempted_at: isoUtc(a.attempted_at), status: a.status, error: a.error })),
  });
}
