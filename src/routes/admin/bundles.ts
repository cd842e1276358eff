// /admin/bundles: bundles found by code, vanity name, owner key prefix or a file's SHA-256, a page at a
// time, and each bundle's page with its files, its reports and the actions on it (bundle-actions.ts).
import type { Ctx } from '../../http/context.ts';
import type { Route } from '../../http/server.ts';
import type { AdminSession } from '../../auth/admin-sessions.ts';
import { bundleDetail, bundleFiles, searchBundles, type BundleDetail, type BundleQuery } from '../../db/admin-bundles.ts';
import { reportsOfCode } from '../../db/admin-reports.ts';
import { bundlePanel } from '../../web/admin/bundle-views.ts';
import { bundleBody, noBundleBody, searchBody, SEARCH_KINDS, type SearchKind } from '../../web/admin/bundles-views.ts';
import { SHORT_CODE_RE } from '../../util/tokens.ts';
import { VANITY_RE } from '../../bundles/vanity.ts';
import type { Safe } from '../../util/html.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';
import { bundleActionRoutes } from './bundle-actions.ts';

/** Bundles on a page of results. */
const RESULTS_PAGE = 50;
/** Files of a bundle shown at once. */
const FILES_PAGE = 100;
/** Reports listed on a bundle's page. */
const REPORTS_SHOWN = 50;

const SHA256_ANY_CASE = /^[0-9a-fA-F]{64}$/;
/** A key's prefix (its first 12 characters), or a whole key pasted, whose prefix is searched. */
const KEY_PREFIX_RE = /^sk_[A-Za-z0-9]{9}(?:[A-Za-z0-9]{34})?$/;
const SEQ_RE = /^[1-9]\d{0,15}$/;

type Parsed = { query: BundleQuery; described: string } | { problem: string };

/** What a search term asks for; `by` 'any' goes by its shape. */
export function parseSearch(raw: string, by: SearchKind): Parsed {
  let q = raw.trim();
  if (q === '') return { query: { by: 'all' }, described: 'Every bundle, newest first' };
  // A share link pasted whole: its code or name is the first segment of its path.
  if (/^https?:\/\//i.test(q)) q = URL.canParse(q) ? (new URL(q).pathname.split('/')[1] ?? '') : q;
  const kind = by !== 'any' ? by : SHA256_ANY_CASE.test(q) ? 'sha256' : KEY_PREFIX_RE.test(q) ? 'key' : SHORT_CODE_RE.test(q) ? 'any' : 'vanity';
  switch (kind) {
    case 'sha256':
      return SHA256_ANY_CASE.test(q) ? { query: { by: 'sha256', hex: q.toLowerCase() }, described: `Bundles holding a file with SHA-256 ${q.toLowerCase()}, newest first` } : { problem: 'A SHA-256 is 64 hexadecimal digits.' };
    case 'key':
      return KEY_PREFIX_RE.test(q) ? { query: { by: 'key', prefix: q.slice(0, 12) }, described: `Bundles of key ${q.slice(0, 12)}, newest first` } : { problem: 'A key prefix is the first 12 characters of a key: sk_ and 9 letters or digits.' };
    case 'code':
      return SHORT_CODE_RE.test(q) ? { query: { by: 'code', value: q }, described: `The bundle with code ${q}` } : { problem: 'A short code is 5 letters or digits.' };
    case 'any':
      return { query: { by: 'any', value: q }, described: `The bundle with code or vanity name ${q}` };
    default:
      return VANITY_RE.test(q) ? { query: { by: 'vanity', value: q }, described: `The bundle named ${q}` } : { problem: 'Not a short code, vanity name, key prefix (sk_…) or SHA-256.' };
  }
}

/**
 * A bundle's section as the console shows it (here and beside a report): facts, actions, a page of
 * its files. `back`: the page its forms come back to; `reason`: what a block from it records.
 */
export async function bundleSection(deps: Deps, ctx: Ctx, s: AdminSession, b: BundleDetail, o: { back: string; reason: string }): Promise<Safe> {
  const raw = ctx.query.get('files_after') ?? '';
  const files = await bundleFiles(deps.sql, b.id, SEQ_RE.test(raw) ? Number(raw) : 0, FILES_PAGE);
  return bundlePanel(b, files.rows, {
    csrf: s.csrf,
    back: o.back,
    reason: o.reason,
    more: files.next === null ? null : `${o.back}?files_after=${files.next}`,
    hashing: deps.consoleHashing.pending,
  });
}

export function adminBundlesRoutes(deps: Deps, c: Console): Route[] {
  const search = async (ctx: Ctx, s: AdminSession): Promise<void> => {
    const q = ctx.query.get('q') ?? '';
    const rawBy = ctx.query.get('by') ?? 'any';
    const by: SearchKind = SEARCH_KINDS.some(([k]) => k === rawBy) ? (rawBy as SearchKind) : 'any';
    const after = ctx.query.get('after');
    const parsed = parseSearch(q, by);
    const page = 'query' in parsed ? await searchBundles(deps.sql, parsed.query, after, RESULTS_PAGE) : { rows: [], next: null };
    const href = (extra: Record<string, string>): string => {
      const params = new URLSearchParams({ ...(q ? { q } : {}), ...(by !== 'any' ? { by } : {}), ...extra }).toString();
      return params ? `/admin/bundles?${params}` : '/admin/bundles';
    };
    const body = searchBody({
      q,
      by,
      described: 'query' in parsed ? parsed.described : null,
      byHash: 'query' in parsed && parsed.query.by === 'sha256',
      problem: 'problem' in parsed ? parsed.problem : null,
      rows: page.rows,
      first: after === null,
      firstHref: href({}),
      nextHref: page.next === null ? null : href({ after: page.next }),
    });
    c.render(ctx, s, { title: 'Bundles', active: 'bundles', body });
  };

  const bundle = async (ctx: Ctx, s: AdminSession): Promise<void> => {
    const code = ctx.params[0] ?? '';
    const b = SHORT_CODE_RE.test(code) ? await bundleDetail(deps.sql, code) : undefined;
    if (!b) return c.render(ctx, s, { title: 'No such bundle', active: 'bundles', body: noBundleBody(code), status: 404 });
    const [panel, reports] = await Promise.all([
      bundleSection(deps, ctx, s, b, { back: `/admin/bundles/${b.short_code}`, reason: `bundle ${b.short_code}` }),
      reportsOfCode(deps.sql, b.short_code, 0, REPORTS_SHOWN),
    ]);
    c.render(ctx, s, { title: `Bundle ${b.short_code}`, active: 'bundles', body: bundleBody(panel, b.short_code, reports) });
  };

  return [...c.page('/admin/bundles', search), ...c.page('/admin/bundles/:code', bundle), ...bundleActionRoutes(deps, c)];
}
