// The operator console (/admin): sign-in by one-time link, then the pages. Without a valid session
// every /admin path answers the site's 404 page, so the console's existence is not revealed.
import type { Ctx } from '../../http/context.ts';
import type { Route } from '../../http/server.ts';
import { send } from '../../http/reply.ts';
import { fromOtherSite } from '../../http/cross-site.ts';
import { ADMIN_COOKIE, SESSION_HOURS } from '../../auth/admin-sessions.ts';
import { revokeAdminSessions } from '../../db/admin-sessions.ts';
import { SECURITY_HEADERS, sendHtml } from '../../web/html.ts';
import { signInPage } from '../../web/admin/layout.ts';
import type { Deps } from '../../deps.ts';
import { createConsole } from './console.ts';
import { adminOverviewRoutes } from './overview.ts';
import { adminReportsRoutes } from './reports.ts';
import { adminBundlesRoutes } from './bundles.ts';
import { adminKeysRoutes } from './keys.ts';
import { adminBlocklistRoutes } from './blocklist.ts';
import { adminAuditRoutes } from './audit.ts';

export function adminRoutes(deps: Deps): Route[] {
  const c = createConsole(deps);
  const token = (ctx: Ctx): string => ctx.params[0] ?? '';
  const signInForm = async (ctx: Ctx): Promise<void> => {
    const label = await deps.admin.linkLabel(token(ctx));
    if (label === null) return c.notFound(ctx);
    sendHtml(ctx, 200, signInPage(c.asset, label), 'no-store');
  };
  const signIn = async (ctx: Ctx): Promise<void> => {
    // Another site posting a link it holds would sign this browser into that site's session.
    if (fromOtherSite(ctx.headers, deps.origin(ctx))) return c.notFound(ctx);
    const cookie = await deps.admin.signIn(token(ctx));
    if (cookie === null) return c.notFound(ctx);
    const secure = deps.origin(ctx).startsWith('https:') ? '; Secure' : '';
    send(ctx, 303, '', [
      ['Set-Cookie', `${ADMIN_COOKIE}=${cookie}; Path=/admin; Max-Age=${SESSION_HOURS * 3600}; HttpOnly; SameSite=Strict${secure}`],
      ['Location', '/admin'],
      ['Cache-Control', 'no-store'],
      ...SECURITY_HEADERS,
    ]);
  };
  return [
    // A GET uses nothing (link previews fetch URLs): the page's button posts to the same path.
    { method: 'get', pattern: '/admin/login/:token', handler: signInForm },
    { method: 'post', pattern: '/admin/login/:token', handler: signIn },
    c.action('/admin/logout', async (ctx, s) => {
      await revokeAdminSessions(deps.sql, s.id);
      send(ctx, 303, '', [
        ['Set-Cookie', `${ADMIN_COOKIE}=; Path=/admin; Max-Age=0; HttpOnly; SameSite=Strict`],
        ['Location', '/'],
        ['Cache-Control', 'no-store'],
        ...SECURITY_HEADERS,
      ]);
    }),
    ...adminOverviewRoutes(deps, c),
    ...adminReportsRoutes(deps, c),
    ...adminBundlesRoutes(deps, c),
    ...adminKeysRoutes(deps, c),
    ...adminBlocklistRoutes(deps, c),
    ...adminAuditRoutes(deps, c),
    // Anything else under /admin, signed in or not: the site's 404.
    { method: 'any', pattern: '/admin', handler: (ctx) => c.notFound(ctx) },
    { method: 'any', pattern: '/admin/*', handler: (ctx) => c.notFound(ctx) },
  ];
}
