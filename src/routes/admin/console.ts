// What every console page module is given: routes that exist only for a signed-in operator (any
// other request gets the site's 404 page, exactly as for an unknown path), form actions checked for
// same-site origin and the session's CSRF token, and the console's frame.
import type { Ctx } from '../../http/context.ts';
import type { Route } from '../../http/server.ts';
import { send } from '../../http/reply.ts';
import { readSmallBody } from '../../http/body-in.ts';
import { fromOtherSite } from '../../http/cross-site.ts';
import type { AdminSession } from '../../auth/admin-sessions.ts';
import { loadAssets } from '../../web/assets.ts';
import { SECURITY_HEADERS, sendHtml } from '../../web/html.ts';
import { notFoundPage, requestView } from '../../web/views.ts';
import { consolePage, type ConsolePage } from '../../web/admin/layout.ts';
import { html, type Safe } from '../../util/html.ts';
import type { Deps } from '../../deps.ts';

/** A form's fields are small: codes, hashes, labels, reasons. */
const MAX_FORM = 64 * 1024;

export interface Console {
  /** GET (and HEAD) `pattern` for a signed-in operator. */
  page(pattern: string, handler: (ctx: Ctx, s: AdminSession) => Promise<void>): Route[];
  /** POST `pattern`: a form of the console, with its fields. */
  action(pattern: string, handler: (ctx: Ctx, s: AdminSession, fields: Record<string, string>) => Promise<void>): Route;
  /** Answers with a console page. */
  render(
    ctx: Ctx,
    s: AdminSession,
    o: { title: string; active: ConsolePage | null; body: Safe; scripts?: readonly string[]; styles?: readonly string[]; status?: number },
  ): void;
  /** 303 to `to`, with `notice` shown on the page it leads to. */
  redirect(ctx: Ctx, to: string, notice?: string): void;
  notFound(ctx: Ctx): void;
  readonly asset: (name: string) => string;
}

export function createConsole(deps: Deps): Console {
  const assets = loadAssets();
  const asset = (name: string): string => assets.url(name);
  const notFound = (ctx: Ctx): void => sendHtml(ctx, 404, notFoundPage(requestView(assets, deps.origin(ctx))));
  const signedIn = async (ctx: Ctx): Promise<AdminSession | null> => deps.admin.sessionOf(ctx.headers.cookie);
  return {
    asset,
    notFound,
    page(pattern, handler) {
      const h = async (ctx: Ctx): Promise<void> => {
        const s = await signedIn(ctx);
        return s ? handler(ctx, s) : notFound(ctx);
      };
      return [
        { method: 'get', pattern, handler: h },
        { method: 'head', pattern, handler: h },
      ];
    },
    action(pattern, handler) {
      return {
        method: 'post',
        pattern,
        handler: async (ctx) => {
          const body = readSmallBody(ctx, MAX_FORM);
          body.catch(() => {});
          const s = await signedIn(ctx);
          if (!s) return notFound(ctx);
          const fields = Object.fromEntries(new URLSearchParams((await body).toString('utf8')));
          // SameSite=Strict keeps the cookie off other sites' posts; the origin check and the token
          // refuse them even from a browser that ignores it.
          if (fromOtherSite(ctx.headers, deps.origin(ctx)) || !deps.admin.csrfMatches(s, fields.csrf)) {
            return sendHtml(ctx, 403, consolePage({ asset, title: 'Refused', active: null, label: s.label, csrf: s.csrf, body: forbidden() }), 'no-store');
          }
          await handler(ctx, s, fields);
        },
      };
    },
    render(ctx, s, o) {
      const notice = ctx.query.get('done');
      sendHtml(ctx, o.status ?? 200, consolePage({ asset, title: o.title, active: o.active, label: s.label, csrf: s.csrf, body: o.body, notice, scripts: o.scripts, styles: o.styles }), 'no-store');
    },
    redirect(ctx, to, notice) {
      const url = notice ? `${to}${to.includes('?') ? '&' : '?'}done=${encodeURIComponent(notice)}` : to;
      send(ctx, 303, '', [['Location', url], ['Cache-Control', 'no-store'], ...SECURITY_HEADERS]);
    },
  };
}

function forbidden(): Safe {
  return html`<section class="card"><h1>Refused</h1><p>This form did not come from this console page. Reload the page and try again.</p></section>`;
}
