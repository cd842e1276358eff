import { escapeHtml } from '../util/html.ts';
import { oneLine } from '../util/names.ts';
import type { Plan } from '../plans.ts';
import { sqlUtc } from '../util/time.ts';
import type { Mail } from './transport.ts';

const page = (paragraphs: string[]): string =>
  `<!doctype html><html><body style="font-family:system-ui,sans-serif;line-height:1.5">${paragraphs.map((p) => `<p>${p}</p>`).join('')}</body></html>`;

/** The purchased key: the only copy besides the one-time reveal on the success page. */
export function keyMail(o: { to: string; key: string; plan: Plan; mode: 'subscription' | 'payment'; expiresAt: Date | null; baseUrl: string }): Mail {
  const term =
    o.mode === 'subscription'
      ? 'It works as long as the subscription runs; manage or cancel it at'
      : `It is a one-time 30-day pass and stops working at ${o.expiresAt ? sqlUtc(o.expiresAt) : ''} UTC. Purchases are listed at`;
  const portal = `${o.baseUrl}/api-keys/portal`;
  const text = [
    `Your Sluice ${o.plan.title} API key:`,
    '',
    `    ${o.key}`,
    '',
    'Keep it secret: it is shown only here and once on the purchase page, and cannot be recovered.',
    'Send it as "Authorization: Bearer <key>" with uploads and /api/v1/my/* requests.',
    '',
    `${term} ${portal}`,
  ].join('\n');
  const html = page([
    `Your Sluice ${escapeHtml(o.plan.title)} API key:`,
    `<code style="font-size:1.1em">${escapeHtml(o.key)}</code>`,
    'Keep it secret: it is shown only here and once on the purchase page, and cannot be recovered. Send it as <code>Authorization: Bearer &lt;key&gt;</code> with uploads and <code>/api/v1/my/*</code> requests.',
    `${escapeHtml(term)} <a href="${escapeHtml(portal)}">${escapeHtml(portal)}</a>`,
  ]);
  return { to: o.to, subject: `Your Sluice ${o.plan.title} API key`, text, html };
}

/** The single-use link to the billing portal. */
export function portalMail(o: { to: string; link: string; validMinutes: number }): Mail {
  const text = [
    'Open this link to manage your Sluice subscription (change plan, update the payment method, cancel):',
    '',
    o.link,
    '',
    `It works once and for ${o.validMinutes} minutes. If you did not ask for it, ignore this mail.`,
  ].join('\n');
  const html = page([
    'Open this link to manage your Sluice subscription (change plan, update the payment method, cancel):',
    `<a href="${escapeHtml(o.link)}">Manage my subscription</a>`,
    `It works once and for ${o.validMinutes} minutes. If you did not ask for it, ignore this mail.`,
  ]);
  return { to: o.to, subject: 'Your Sluice billing link', text, html };
}

export interface DownloadEvent {
  /** The file's name (the uploader's text), or with `zipFiles` the zip's (ours: `<code>.zip`). */
  readonly what: string;
  /** Set when the whole bundle was downloaded as one zip: how many files it held. */
  readonly zipFiles?: number | null;
  readonly at: Date;
}

/** Lists at most this many downloads; the rest are counted. */
const MAX_LISTED = 50;
/** A file name is shown up to this many characters: it is the uploader's text, not ours. */
const MAX_NAME = 120;

/** The uploader's text as one quoted line: control characters and line breaks become spaces. */
export function quotedName(name: string): string {
  const flat = oneLine(name);
  const short = [...flat].length > MAX_NAME ? `${[...flat].slice(0, MAX_NAME).join('')}…` : flat;
  return `"${short}"`;
}

const line = (e: DownloadEvent): string =>
  e.zipFiles == null ? `file named ${quotedName(e.what)}` : `all ${e.zipFiles} files as ${e.what}`;

/**
 * One batch of downloads of one bundle: what and when, never who. File names are the uploader's
 * text, so each is quoted and labelled as a file name; the mail carries a one-click unsubscribe
 * (RFC 8058 headers and a link).
 */
export function downloadsMail(o: {
  to: string; shortCode: string; events: readonly DownloadEvent[]; baseUrl: string; unsubscribeUrl: string;
}): Mail {
  const listed = o.events.slice(0, MAX_LISTED);
  const more = o.events.length - listed.length;
  const link = `${o.baseUrl}/${o.shortCode}`;
  const n = o.events.length;
  const head = `${n === 1 ? 'A download' : `${n} downloads`} from your Sluice bundle ${o.shortCode} (${link}):`;
  const names = 'File names are shown as the uploader gave them; Sluice does not check what they say.';
  const why = 'You get this mail because this address was given as notify_email at upload; at most one mail per bundle every 10 minutes.';
  const stop = 'To get no more of these mails at this address, open:';
  const text = [
    head,
    '',
    ...listed.map((e) => `  ${sqlUtc(e.at)} UTC  ${line(e)}`),
    ...(more > 0 ? [`  … and ${more} more`] : []),
    '',
    names,
    why,
    `${stop} ${o.unsubscribeUrl}`,
  ].join('\n');
  const html = page([
    escapeHtml(head),
    `<ul>${listed.map((e) => `<li>${escapeHtml(sqlUtc(e.at))} UTC — ${e.zipFiles == null ? `file named <code>${escapeHtml(quotedName(e.what))}</code>` : escapeHtml(line(e))}</li>`).join('')}${more > 0 ? `<li>… and ${more} more</li>` : ''}</ul>`,
    escapeHtml(names),
    escapeHtml(why),
    `<a href="${escapeHtml(o.unsubscribeUrl)}">Unsubscribe this address</a>`,
  ]);
  return {
    to: o.to,
    subject: `Sluice: ${n === 1 ? 'a file was' : `${n} files were`} downloaded from ${o.shortCode}`,
    text,
    html,
    headers: { 'List-Unsubscribe': `<${o.unsubscribeUrl}>`, 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click' },
  };
}
