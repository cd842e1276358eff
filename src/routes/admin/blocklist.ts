// The console's blocklist: list (keyset-paged, newest first), block a SHA-256 (the bundles already
// holding it are quarantined), remove one. Both actions are audited under the session's label.
import type { Ctx } from '../../http/context.ts';
import type { Route } from '../../http/server.ts';
import type { AdminSession } from '../../auth/admin-sessions.ts';
import { SHA256_RE } from '../../abuse/blocklist.ts';
import { BLOCKED_CURSOR_RE, blockedPage } from '../../db/admin-lists.ts';
import { blockAudited, unblockAudited } from '../../db/abuse-actions.ts';
import { CONTROL_CHARS } from '../../util/names.ts';
import { blocklistBody } from '../../web/admin/blocklist-views.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

const PAGE_SIZE = 50;
const MAX_REASON = 500;
const CONTROL = new RegExp(`[${CONTROL_CHARS}]`);

/** 64 hex digits, either case, blanks around them ignored; null for anything else. */
const hashOf = (v: string | undefined): Buffer | null => {
  const hex = (v ?? '').trim().toLowerCase();
  return SHA256_RE.test(hex) ? Buffer.from(hex, 'hex') : null;
};

export function adminBlocklistRoutes(deps: Deps, c: Console): Route[] {
  const show = async (ctx: Ctx, s: AdminSession, o: { before?: string | null; error?: string; form?: { sha256?: string; reason?: string } } = {}): Promise<void> => {
    const before = o.before ?? null;
    const list = await blockedPage(deps.sql, before, PAGE_SIZE);
    const body = blocklistBody({ csrf: s.csrf, list, later: before !== null, error: o.error, form: o.form });
    c.render(ctx, s, { title: 'Blocklist', active: 'blocklist', body, status: o.error ? 400 : 200 });
  };
  return [
    ...c.page('/admin/blocklist', async (ctx, s) => {
      const before = ctx.query.get('before');
      await show(ctx, s, { before: before !== null && BLOCKED_CURSOR_RE.test(before) ? before : null });
    }),
    c.action('/admin/blocklist/add', async (ctx, s, f) => {
      const sha = hashOf(f.sha256);
      const reason = (f.reason ?? '').trim();
      const form = { sha256: f.sha256, reason: f.reason };
      if (!sha) return show(ctx, s, { error: 'A SHA-256 is 64 hex digits (0-9, a-f).', form });
      if (CONTROL.test(reason) || reason.length > MAX_REASON) return show(ctx, s, { error: `A reason is one line of at most ${MAX_REASON} characters.`, form });
      const held = await blockAudited(deps.sql, sha, reason || null, s.label);
      // The database tells every node; this node forgets at once, before the redirect is followed.
      if (held.length > 0) deps.bundles.invalidate(null);
      const hex = sha.toString('hex');
      c.redirect(ctx, '/admin/blocklist', `Blocked ${hex}${held.length ? `; quarantined ${held.join(' ')}` : ''}.`);
    }),
    c.action('/admin/blocklist/remove', async (ctx, s, f) => {
      const sha = hashOf(f.sha256);
      if (!sha) return c.redirect(ctx, '/admin/blocklist', 'That is not a SHA-256: nothing removed.');
      const hex = sha.toString('hex');
      const removed = await unblockAudited(deps.sql, sha, s.label);
      c.redirect(ctx, '/admin/blocklist', removed ? `Removed ${hex}. Bundles it quarantined stay quarantined until released.` : `${hex} was not blocked.`);
    }),
  ];
}
