import type { Ctx } from '../http/context.ts';
import { sendJson } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { AppError } from '../errors.ts';
import { deleteBundle, type BundleRow, type FileRow } from '../db/bundles.ts';
import { SHORT_CODE_RE } from '../auth/tokens.ts';
import { PLANS } from '../auth/plans.ts';
import { sqlUtc } from '../util/time.ts';
import type { Deps } from './deps.ts';
import { refuseQuarantined } from '../abuse/quarantine.ts';

export function myRoutes(deps: Deps): Route[] {
  return [
    { method: 'get', pattern: '/api/v1/my/bundles', handler: (ctx) => myBundles(ctx, deps) },
    { method: 'get', pattern: '/api/v1/my/usage', handler: (ctx) => myUsage(ctx, deps) },
    { method: 'del', pattern: '/api/v1/my/bundles/:code', handler: (ctx) => deleteMine(ctx, deps) },
  ];
}

// A quarantined bundle stays listed (as quarantined, without its files) whatever its expiry.
const ACTIVE = '(b.expires_at is null or b.expires_at > now() or b.quarantined_at is not null)';

async function myBundles(ctx: Ctx, deps: Deps): Promise<void> {
  const key = deps.access.requireKey(await deps.access.callerOf(ctx));
  const bundles = await deps.sql<BundleRow[]>`
    select b.*, false as is_expired from bundles b
    where b.api_key_id = ${key.id} and ${deps.sql.unsafe(ACTIVE)}
    order by b.created_at desc, b.id desc limit 100`;
  const ids = bundles.map((b) => b.id);
  const files = ids.length
    ? await deps.sql<FileRow[]>`select * from files where bundle_id = any(${ids}) order by id`
    : [];
  const byBundle = new Map<number, FileRow[]>();
  for (const f of files) {
    const list = byBundle.get(f.bundle_id);
    if (list) list.push(f);
    else byBundle.set(f.bundle_id, [f]);
  }
  sendJson(ctx, 200, {
    success: true,
    bundles: bundles.map((b) => ({
      short_code: b.short_code,
      share_url: `/${b.short_code}`,
      created_at: sqlUtc(b.created_at),
      expires_at: b.expires_at ? sqlUtc(b.expires_at) : null,
      total_size_bytes: b.total_size_bytes,
      file_count: b.file_count,
      view_count: b.view_count,
      is_encrypted: b.is_encrypted,
      password_protected: b.access_password_hash !== null,
      description: b.description ?? '',
      quarantined: b.quarantined_at !== null,
      files: (b.quarantined_at !== null ? [] : byBundle.get(b.id) ?? []).map((f) => {
        const out: Record<string, unknown> = {
          id: f.id,
          name: f.name,
          size: f.size,
          mime_type: f.mime_type,
          download_count: f.download_count,
          download_url: `/api/v1/download/${f.id}`,
        };
        // Previews are raster images only: SVG is never rasterized (untrusted markup).
        if (f.mime_type.startsWith('image/') && f.mime_type !== 'image/svg+xml') {
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
  const [totals] = await deps.sql<{ bundle_count: number; total_bytes: number; total_files: number }[]>`
    select count(*)::int8 as bundle_count, coalesce(sum(b.total_size_bytes), 0)::int8 as total_bytes,
           coalesce(sum(b.file_count), 0)::int8 as total_files
    from bundles b where b.api_key_id = ${key.id} and ${deps.sql.unsafe(ACTIVE)}`;
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
  const [b] = await deps.sql<{ id: number; quarantined_at: Date | null }[]>`
    select id, quarantined_at from bundles where short_code = ${code} and api_key_id = ${key.id}`;
  if (!b) throw new AppError('NOT_OWNER');
  refuseQuarantined(b);
  const keys = await deleteBundle(deps.sql, b.id);
  deps.bundles.invalidate(b.id);
  await Promise.all(keys.map((k) => deps.disk.remove(k).catch((err: unknown) => deps.log.warn({ err }, 'file not removed'))));
  sendJson(ctx, 200, { success: true, deleted_short_code: code });
}
