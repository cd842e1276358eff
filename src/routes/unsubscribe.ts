import type { Ctx } from '../http/context.ts';
import type { Route } from '../http/server.ts';
import { readSmallBody } from '../http/body-in.ts';
import { loadAssets } from '../web/assets.ts';
import { layout, sendHtml } from '../web/html.ts';
import { html } from '../util/html.ts';
import { unsubscribe } from '../notify/recipients.ts';
import type { Signer } from '../auth/signing.ts';
import type { Deps } from '../deps.ts';

/** The unsubscribe link of an address key: `/unsubscribe?a=<key>&s=<signature>`, valid for good. */
export function unsubscribeUrl(baseUrl: string, signer: Signer, key: string): string {
  return `${baseUrl}/unsubscribe?a=${key}&s=${signer.unsubscribeSig(key)}`;
}

/**
 * The unsubscribe link of download notifications. POST unsubscribes (the one-click of RFC 8058,
 * sent by the mail client from the List-Unsubscribe headers, and the button of the page); GET only
 * shows that button, since mail scanners open links on their own.
 */
export function unsubscribeRoutes(deps: Deps): Route[] {
  const assets = loadAssets();
  const asset = (name: string): string => assets.url(name);
  const page = (ctx: Ctx, status: number, title: string, body: ReturnType<typeof html>): void =>
    sendHtml(ctx, status, layout({ title: `${title} · Sluice`, body: html`<section class="card center">${body}</section>`, asset }), 'no-store');
  const signed = (ctx: Ctx): string | null => {
    const key = ctx.query.get('a') ?? '';
    return /^[0-9a-f]{64}$/.test(key) && deps.signer.verifyUnsubscribe(key, ctx.query.get('s')) ? key : null;
  };
  const invalid = (ctx: Ctx): void =>
    page(ctx, 404, 'Invalid link', html`<h1>This unsubscribe link is not valid</h1><p class="lead">Copy the whole link from the mail.</p>`);
  return [
    {
      method: 'get',
      pattern: '/unsubscribe',
      handler: (ctx) => {
        const key = signed(ctx);
        if (key === null) return invalid(ctx);
        page(ctx, 200, 'Unsubscribe', html`<h1>Stop download notifications?</h1>
<p class="lead">This address will get no more mails about downloads of Sluice bundles.</p>
<form method="post" action="/unsubscribe?a=${key}&amp;s=${ctx.query.get('s')}"><button class="btn primary" type="submit">Unsubscribe</button></form>`);
      },
    },
    {
      method: 'post',
      pattern: '/unsubscribe',
      handler: async (ctx) => {
        const key = signed(ctx);
        // The body (List-Unsubscribe=One-Click, or the form's nothing) says nothing the link does not.
        await readSmallBody(ctx, 4096).catch(() => Buffer.alloc(0));
        if (key === null) return invalid(ctx);
        await unsubscribe(deps.sql, key);
        page(ctx, 200, 'Unsubscribed', html`<h1>Unsubscribed</h1><p class="lead">This address gets no more download notifications from Sluice.</p>`);
      },
    },
  ];
}
