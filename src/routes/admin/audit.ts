// The console's audit trail: newest first, keyset-paged on id, filtered by action or operator.
import type { Route } from '../../http/server.ts';
import { auditPage, ID_CURSOR_RE } from '../../db/admin-lists.ts';
import { trailBody } from '../../web/admin/trail-views.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

const PAGE_SIZE = 100;

/** A filter field: blank means no filter. */
const filterOf = (v: string | null): string | null => (v === null || v.trim() === '' ? null : v.trim());

export function adminAuditRoutes(deps: Deps, c: Console): Route[] {
  return c.page('/admin/audit', async (ctx, s) => {
    const q = ctx.query;
    const raw = q.get('before');
    const before = raw !== null && ID_CURSOR_RE.test(raw) ? raw : null;
    const action = filterOf(q.get('action'));
    const operator = filterOf(q.get('operator'));
    const list = await auditPage(deps.sql, { before, action, operator }, PAGE_SIZE);
    c.render(ctx, s, { title: 'Audit trail', active: 'audit', body: trailBody({ list, later: before !== null, action, operator }) });
  });
}
