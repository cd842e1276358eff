import { dueRequests, insertRequestEvents, mailRequestEvents } from '../db/notify-events.ts';
import type { Mail } from '../mail/transport.ts';
import { escapeHtml, humanSize } from '../util/html.ts';
import { sqlUtc } from '../util/time.ts';
import { flushBatches } from './batches.ts';
import type { NotifierDeps } from './batches.ts';

/** Names listed in one mail; the rest are counted. */
const MAX_LISTED = 50;

export interface ArrivalNotifier {
  /** Records files that arrived through request `requestId`; never rejects (a lost event costs a mail line). */
  received(requestId: number, files: ReadonlyArray<{ name: string; size: number }>): Promise<void>;
  /**
   * Queues one mail per request with waiting events whose last mail is at least 10 minutes old, to
   * its key's e-mail, unless that address unsubscribed or had its day's mails (the events are dropped).
   */
  flush(): Promise<number>;
}

/** Mails the key holder when files arrive through its upload requests, batched like download notifications. */
export function createArrivalNotifier(deps: NotifierDeps): ArrivalNotifier {
  const { sql, log } = deps;
  const now = deps.now ?? (() => new Date());
  return {
    async received(requestId, files) {
      if (files.length === 0) return;
      const at = now();
      await insertRequestEvents(sql, requestId, files, at).then(
        () => deps.recorded?.(),
        (err: unknown) => log.warn({ err, requestId }, 'arrival not recorded'),
      );
    },

    flush: () =>
      flushBatches(deps, {
        due: dueRequests,
        lockAndSend: mailRequestEvents,
        address: (r) => r.email,
        mail: (r, to, events, unsubscribeUrl) =>
          arrivalsMail({ to, label: r.label, shortCode: r.short_code, events, baseUrl: deps.baseUrl, unsubscribeUrl }),
      }, now()),
  };
}

export function arrivalsMail(o: {
  to: string; label: string | null; shortCode: string; events: ReadonlyArray<{ what: string; size: number; at: Date }>; baseUrl: string; unsubscribeUrl: string;
}): Mail {
  const listed = o.events.slice(0, MAX_LISTED);
  const more = o.events.length - listed.length;
  const n = o.events.length;
  const name = o.label ? `"${o.label}"` : 'your upload request';
  const head = `${n === 1 ? 'A file' : `${n} files`} arrived through ${name}. They are in bundle ${o.shortCode}, which only your API key opens (${o.baseUrl}/api/v1/my/bundles).`;
  const names = 'File names are shown as the sender gave them; Sluice does not check what they say.';
  const stop = 'To get no more of these mails at this address, open:';
  const lines = listed.map((e) => `${sqlUtc(e.at)} UTC  ${JSON.stringify(e.what)} (${humanSize(e.size)})`);
  return {
    to: o.to,
    subject: `Sluice: ${n === 1 ? 'a file' : `${n} files`} arrived through ${name}`,
    text: [head, '', ...lines.map((l) => `  ${l}`), ...(more > 0 ? [`  … and ${more} more`] : []), '', names, `${stop} ${o.unsubscribeUrl}`].join('\n'),
    html: `<!doctype html><html><body><p>${escapeHtml(head)}</p><ul>${lines.map((l) => `<li>${escapeHtml(l)}</li>`).join('')}${more > 0 ? `<li>… and ${more} more</li>` : ''}</ul><p>${escapeHtml(names)}</p><p><a href="${escapeHtml(o.unsubscribeUrl)}">Unsubscribe this address</a></p></body></html>`,
    headers: { 'List-Unsubscribe': `<${o.unsubscribeUrl}>`, 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click' },
  };
}
