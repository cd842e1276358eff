import type { Sql } from '../db/sql.ts';
import type { Outbox } from '../mail/outbox.ts';
import type { Mail } from '../mail/transport.ts';
import { escapeHtml } from '../util/html.ts';
import { quotedName } from '../mail/messages.ts';
import { sqlUtc } from '../util/time.ts';
import { mailUnmailedReports, type ReportRow } from '../db/abuse.ts';

/** At most one abuse mail per this window: a report storm makes one mail, not hundreds. */
export const REPORT_MAIL_WINDOW_MS = 5 * 60_000;
const MAX_LISTED = 100;

/**
 * Queues one mail to ABUSE_EMAIL listing every report not mailed yet, unless one went out within
 * the window (the next pass after it sends the rest). Returns the reports mailed. Workers of
 * several processes take turns: the rows are claimed with `for update skip locked`.
 */
export async function mailReports(deps: { sql: Sql; outbox: Outbox; to: string | undefined; baseUrl: string }, now = new Date()): Promise<number> {
  const { to } = deps;
  if (to === undefined) return 0;
  return mailUnmailedReports(deps.sql, now, REPORT_MAIL_WINDOW_MS, MAX_LISTED, (rows, tx) => deps.outbox.enqueue(reportsMail(to, rows, deps.baseUrl), tx));
}

/** The reporters' text is quoted and escaped: it is theirs, never markup of ours. */
export function reportsMail(to: string, rows: readonly ReportRow[], baseUrl: string): Mail {
  const head = `${rows.length === 1 ? 'A new abuse report' : `${rows.length} new abuse reports`} on ${baseUrl}:`;
  const lines = rows.map((r) => {
    const parts = [`#${r.id}  ${sqlUtc(r.created_at)} UTC  ${r.reason}  ${baseUrl}/${r.short_code}`];
    if (r.contact) parts.push(`    contact: ${quotedName(r.contact)}`);
    if (r.details) parts.push(`    details: ${quotedName(r.details.slice(0, 500))}`);
    return parts.join('\n');
  });
  const howto = 'Review with `sluice reports list --open`; hold a bundle with `sluice bundles quarantine CODE`; close with `sluice reports close ID`.';
  const text = [head, '', ...lines, '', howto].join('\n');
  const html = `<!doctype html><html><body style="font-family:system-ui,sans-serif;line-height:1.5"><p>${escapeHtml(head)}</p><ul>${rows
    .map(
      (r) =>
        `<li>#${r.id} ${escapeHtml(sqlUtc(r.created_at))} UTC <b>${escapeHtml(r.reason)}</b> <code>${escapeHtml(`${baseUrl}/${r.short_code}`)}</code>` +
        (r.contact ? `<br>contact: <code>${escapeHtml(quotedName(r.contact))}</code>` : '') +
        (r.details ? `<br>details: <code>${escapeHtml(quotedName(r.details.slice(0, 500)))}</code>` : '') +
        '</li>',
    )
    .join('')}</ul><p>${escapeHtml(howto)}</p></body></html>`;
  return { to, subject: `Sluice: ${rows.length === 1 ? 'an abuse report' : `${rows.length} abuse reports`}`, text, html };
}
