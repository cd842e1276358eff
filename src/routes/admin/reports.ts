// /admin/reports: the queue of abuse reports, a page at a time, and each report beside its bundle with
// the actions on both (the bundle's are bundle-actions.ts's; closing the report is here).
import type { Ctx } from '../../http/context.ts';
import type { Route } from '../../http/server.ts';
import type { AdminSession } from '../../auth/admin-sessions.ts';
import { closeReportAudited } from '../../db/abuse-actions.ts';
import { reportById, reportQueue, reportsOfCode } from '../../db/admin-reports.ts';
import { bundleDetail } from '../../db/admin-bundles.ts';
import { reportBody, reportQueueBody } from '../../web/admin/reports-views.ts';
import { html } from '../../util/html.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';
import { bundleSection } from './bundles.ts';

/** Reports on a page of the queue. */
const QUEUE_PAGE = 50;
/** Other reports of the same bundle listed on a report's page. */
const OTHERS_SHOWN = 20;

const ID_RE = /^[1-9]\d{0,15}$/;

export function adminReportsRoutes(deps: Deps, c: Console): Route[] {
  const queue = async (ctx: Ctx, s: AdminSession): Promise<void> => {
    const after = ctx.query.get('after');
    const page = await reportQueue(deps.sql, after, QUEUE_PAGE);
    const nextHref = page.next === null ? null : `/admin/reports?after=${encodeURIComponent(page.next)}`;
    c.render(ctx, s, { title: 'Reports', active: 'reports', body: reportQueueBody(page, { first: after === null, nextHref }) });
  };

  const report = async (ctx: Ctx, s: AdminSession): Promise<void> => {
    const raw = ctx.params[0] ?? '';
    const r = ID_RE.test(raw) ? await reportById(deps.sql, Number(raw)) : undefined;
    if (!r) {
      const body = html`<section class="card"><h1>No such report</h1><p><a href="/admin/reports">Back to the reports</a></p></section>`;
      return c.render(ctx, s, { title: 'No such report', active: 'reports', body, status: 404 });
    }
    const [b, others] = await Promise.all([bundleDetail(deps.sql, r.short_code), reportsOfCode(deps.sql, r.short_code, r.id, OTHERS_SHOWN)]);
    const self = `/admin/reports/${r.id}`;
    const bundle = b ? await bundleSection(deps, ctx, s, b, { back: self, reason: `report ${r.id} (${r.reason})` }) : null;
    const newer = b !== undefined && b.created_at.getTime() > r.created_at.getTime();
    c.render(ctx, s, { title: `Report ${r.id}`, active: 'reports', body: reportBody(r, { csrf: s.csrf, others, bundle, newer }) });
  };

  return [
    ...c.page('/admin/reports', queue),
    ...c.page('/admin/reports/:id', report),
    c.action('/admin/reports/:id/close', async (ctx, s) => {
      const id = ctx.params[0] ?? '';
      if (!ID_RE.test(id)) return c.notFound(ctx);
      const result = await closeReportAudited(deps.sql, id, s.label);
      if (result === 'unknown') return c.redirect(ctx, '/admin/reports', `No report ${id}.`);
      c.redirect(ctx, `/admin/reports/${id}`, result === 'closed' ? `Closed report ${id}.` : `Report ${id} was already closed.`);
    }),
  ];
}
