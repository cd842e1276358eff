import type { Route } from '../http/server.ts';
import { sendError } from '../http/reply.ts';
import { AppError } from '../errors.ts';
import type { Billing } from '../billing/billing.ts';
import type { Deps } from '../deps.ts';
import { uploadRoutes } from './upload.ts';
import { bundleRoutes } from './bundle.ts';
import { downloadRoutes } from './download.ts';
import { healthRoutes } from './health.ts';
import { myRoutes } from './my.ts';
import { webhookRoutes } from './webhooks.ts';
import { vanityRoutes } from './vanity.ts';
import { requestRoutes } from './requests.ts';
import { verifyAccessRoutes } from './verify-access.ts';
import { zipRoutes } from './zip.ts';
import { contentRoutes } from './content.ts';
import { pageRoutes } from './pages.ts';
import { unsubscribeRoutes } from './unsubscribe.ts';
import { billingRoutes } from './billing.ts';
import { tusRoutes } from '../tus/routes.ts';
import { reportRoutes, type ReportDeps } from './reports.ts';
import { adminRoutes } from './admin/index.ts';

/** Every route the server mounts, in the order uWS tries them (the catch-alls last). */
export function routeTable(deps: Deps & ReportDeps & { billing: Billing }): Route[] {
  return [
    ...healthRoutes(deps),
    ...uploadRoutes(deps),
    ...bundleRoutes(deps),
    ...downloadRoutes(deps),
    ...myRoutes(deps),
    ...webhookRoutes(deps),
    ...vanityRoutes(deps),
    ...requestRoutes(deps),
    ...verifyAccessRoutes(deps),
    ...zipRoutes(deps),
    ...contentRoutes(deps),
    ...billingRoutes(deps),
    // Before the pages: `/admin` would otherwise be taken for a bundle's code.
    ...adminRoutes(deps),
    ...unsubscribeRoutes(deps),
    ...pageRoutes(deps),
    ...tusRoutes(deps),
    ...reportRoutes(deps),
    // Unknown /api paths still count against the budget and carry the rate-limit headers.
    { method: 'any', pattern: '/api/*', handler: (ctx) => sendError(ctx, new AppError('ROUTE_NOT_FOUND')) },
    { method: 'any', pattern: '/*', handler: (ctx) => sendError(ctx, new AppError('ROUTE_NOT_FOUND')) },
  ];
}
