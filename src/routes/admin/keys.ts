// The console's keys page: list (keyset-paged, newest first), mint, revoke. Minting checks its fields
// as `sluice keys create` does; a new key is shown once, on the answer to the form, and stored only as
// a hash. Each rendering of the form carries a name of its own, so a reload of the answer, which sends
// the same form again, finds the key it made instead of minting a second. Both actions are audited under
// the session's label.
import { createHash, randomBytes } from 'node:crypto';
import type { Ctx } from '../../http/context.ts';
import type { Route } from '../../http/server.ts';
import type { AdminSession } from '../../auth/admin-sessions.ts';
import { checkKeyFields, mintKeyAudited, type KeyFields, type KeyRequest } from '../../auth/key-request.ts';
import { ID_CURSOR_RE, keysPage } from '../../db/admin-lists.ts';
import { revokeKeyAudited } from '../../db/key-actions.ts';
import { apiKeyByMintForm, isMintFormTaken } from '../../db/api-keys.ts';
import { keysBody, mintedBeforeBody, mintedBody } from '../../web/admin/keys-views.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

const PAGE_SIZE = 50;
/** A key's prefix: `sk_` and 9 base62 characters. */
const PREFIX_RE = /^sk_[A-Za-z0-9]{9}$/;
/** A mint form's name: 128 random bits, base64url. A form sent without one (a script) mints every time. */
const FORM_ID_RE = /^[A-Za-z0-9_-]{22}$/;

/** A form field as given: blank is left out, as an absent flag is. */
const given = (v: string | undefined): string | undefined => (v === undefined || v.trim() === '' ? undefined : v.trim());

/**
 * What a mint records of the form that asked for it: the form's name and a digest of what it asked. A
 * page shown again from the browser's history keeps its old name, and filled in anew it is a new
 * request: only the same form with the same fields (a reload of the answer) finds the earlier key.
 */
const mintForm = (formId: string, k: KeyRequest): string =>
  `${formId}.${createHash('sha256').update(JSON.stringify([k.plan, k.label, k.email, k.days])).digest('base64url')}`;

export function adminKeysRoutes(deps: Deps, c: Console): Route[] {
  const show = async (ctx: Ctx, s: AdminSession, o: { before?: string | null; error?: string; form?: KeyFields } = {}): Promise<void> => {
    const before = o.before ?? null;
    const list = await keysPage(deps.sql, before, PAGE_SIZE);
    const body = keysBody({ csrf: s.csrf, formId: randomBytes(16).toString('base64url'), list, later: before !== null, error: o.error, form: o.form });
    c.render(ctx, s, { title: 'API keys', active: 'keys', body, status: o.error ? 400 : 200 });
  };
  return [
    ...c.page('/admin/keys', async (ctx, s) => {
      const before = ctx.query.get('before');
      await show(ctx, s, { before: before !== null && ID_CURSOR_RE.test(before) ? before : null });
    }),
    c.action('/admin/keys/mint', async (ctx, s, f) => {
      const form: KeyFields = { plan: given(f.plan), label: given(f.label), email: given(f.email), days: given(f.days) };
      const checked = checkKeyFields(form);
      if (!checked.ok) return show(ctx, s, { error: checked.error, form });
      const formId = f.form_id !== undefined && FORM_ID_RE.test(f.form_id) ? mintForm(f.form_id, checked.key) : null;
      // The unique index on the form's name is the one check: a form sent again, even at the same
      // moment, fails its insert (and the audit record with it) and finds the key the first made.
      const minted = await mintKeyAudited(deps.sql, checked.key, s.label, formId).catch((err: unknown) => {
        if (isMintFormTaken(err)) return null;
        throw err;
      });
      if (!minted) {
        const row = (await apiKeyByMintForm(deps.sql, formId!))!;
        return c.render(ctx, s, { title: `Key ${row.prefix}`, active: 'keys', body: mintedBeforeBody(row) });
      }
      const { key, row } = minted;
      const body = mintedBody({ key, prefix: row.prefix, plan: row.plan, label: row.label, expires: row.expires_at });
      c.render(ctx, s, { title: `New key ${row.prefix}`, active: 'keys', body });
    }),
    c.action('/admin/keys/revoke', async (ctx, s, f) => {
      const prefix = f.prefix ?? '';
      if (!PREFIX_RE.test(prefix)) return c.redirect(ctx, '/admin/keys', 'That is not a key prefix: nothing revoked.');
      const r = await revokeKeyAudited(deps.sql, prefix, s.label);
      const notice = { revoked: `Revoked ${prefix}: requests with it are refused from now on.`, already: `${prefix} was already revoked.`, unknown: `No key ${prefix}: nothing revoked.` }[r];
      c.redirect(ctx, '/admin/keys', notice);
    }),
  ];
}
