import type { Ctx } from '../http/context.ts';
import { sendJson } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { AppError } from '../errors.ts';
import { deleteBundle } from '../db/bundles.ts';
import { findOwnedBundleId, keyTotals, listKeyBundles } from '../db/key-bundles.ts';
import { SHORT_CODE_RE } from '../util/tokens.ts';
import { PLANS } from '../plans.ts';
import { sqlUtc } from '../util/time.ts';
import type { Deps } from '../deps.ts';
import { vanityUrl } from '../bundles/vanity.ts';
import { limitJson } from '../bundles/limits.ts';
import { mayChange } from '../bundles/guard.ts';
import { removeObjects } from '../storage/remove.ts';
import { hasPreview } from '../thumbs/previewable.ts';

export function myRoutes(deps: Deps): Route[] {
  return [
    { method: 'get', pattern: '/api/v1/my/bundles', handler: (ctx) => myBundles(ctx, deps) },
    { method: 'get', pattern: '/api/v1/my/usage', handler: (ctx) => myUsage(ctx, deps) },
    { method: 'del', pattern: '/api/v1/my/bundles/:code', handler: (ctx) => deleteMine(ctx, deps) },
  ];
}

async function myBundles(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const bundles = await listKeyBundles(deps.sql, key.id);
  sendJson(ctx, 200, {
    success: true,
    bundles: bundles.map((b) => ({
      short_code: b.short_code,
      share_url: `/${b.short_code}`,
      ...(b.vanity ? { vanity_url: vanityUrl(b.vanity) } : {}),
      created_at: sqlUtc(b.created_at),
      expires_at: b.expires_at ? sqlUtc(b.expires_at) : null,
      total_size_bytes: b.total_size_bytes,
      file_count: b.file_count,
      view_count: b.view_count,
      is_encrypted: b.is_encrypted,
      password_protected: b.access_password_hash !== null,
      description: b.description ?? '',
      ...limitJson(b.max_downloads),
      // A quarantined bundle stays listed, as quarantined, without its files. The field appears only
      // then, so every other entry keeps exactly the interface's fields.
      ...(b.quarantined_at !== null && { quarantined: true }),
      files: (b.quarantined_at !== null ? [] : b.files).map((f) => {
        const out: Record<string, unknown> = {
          id: f.id,
          name: f.name,
          size: f.size,
          mime_type: f.mime_type,
          download_count: f.download_count,
          download_url: `/api/v1/download/${f.id}`,
        };
        if (b.max_downloads !== null) out.downloads_remaining = Math.max(0, b.max_downloads - f.downloads_done);
        if (hasPreview(f.mime_type, { encrypted: b.is_encrypted, maxDownloads: b.max_downloads })) {
          const base = `/d/${f.id}?preview=1`;
          out.thumbnail_url = b.access_password_hash === null ? base : `${base}&${deps.signer.previewQuery(f.id)}`;
        }
        return out;
      }),
    })),
  });
}

async function myUsage(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const plan = PLANS[key.plan];
  const totals = await keyTotals(deps.sql, key.id);
  sendJson(ctx, 200, {
    success: true,
    key: {
      label: key.label ?? '',
      prefix: key.prefix,
      plan: key.plan,
      created_at: sqlUtc(key.created_at),
      last_used_at: sqlUtc(key.last_used_at ?? new Date()),
      rate_limit_per_hour: plan.requestsPerHour,
      max_bundle_size_bytes: plan.maxBundleBytes,
      default_expiry_days: plan.expiryDays,
    },
    totals,
  });
}

async function deleteMine(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const code = ctx.params[0] ?? '';
  if (!SHORT_CODE_RE.test(code)) throw new AppError('INVALID_SHORT_CODE');
  const id = await findOwnedBundleId(deps.sql, code, key.id);
  if (id === undefined) throw new AppError('NOT_OWNER');
  const keys = await deleteBundle(deps.sql, id, mayChange('delete', 'owner'));
  deps.bundles.invalidate(id);
  // As DELETE /api/v1/bundle/:code: answered once the rows are gone, the files removed after.
  sendJson(ctx, 200, { success: true, deleted_short_code: code });
  await removeObjects(deps.blobs, keys, deps.log);
}
