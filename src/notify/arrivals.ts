import type { Sql } from '../db/client.ts';
import type { Mail } from '../mail/transport.ts';
import { escapeHtml, humanSize } from '../web/html.ts';
import { sqlUtc } from '../util/time.ts';
import { addressKey, forgetOldDays, mayMail } from './recipients.ts';
import { NOTIFY_WINDOW_MS, type NotifierDeps } from './downloads.ts';

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
  const { sql, outbox, log } = deps;
  const now = deps.now ?? (() => new Date());
  return {
    async received(requestId, files) {
      if (files.length === 0) return;
      const at = now();
      await sql`
        insert into request_events (request_id, what, size, at)
        select ${requestId}, w, s, ${at} from unnest(${files.map((f) => f.name)}::text[], ${files.map((f) => f.size)}::int8[]) as x(w, s)`.then(
        () => deps.recorded?.(),
        (err: unknown) => log.warn({ err, requestId }, 'arrival not recorded'),
      );
    },

    async flush() {
      const t = now();
      const windowStart = new Date(t.getTime() - NOTIFY_WINDOW_MS);
      const day = t.toISOString().slice(0, 10);
      await forgetOldDays(sql, day);
      const due = await sql<{ request_id: number }[]>`
        select distinct e.request_id from request_events e join upload_requests r on r.id = e.request_id
        where e.at <= ${t} and r.last_mailed_at <= ${windowStart} limit 100`;
      let queued = 0;
      for (const { request_id: id } of due) {
        const sent = await sql.begin(async (tx) => {
          // The row lock serializes workers of several processes on one request.
          const [r] = await tx<{ label: string | null; short_code: string; email: string | null; last_mailed_at: Date }[]>`
            select r.label, b.short_code, k.owner_email as email, r.last_mailed_at
            from upload_requests r join bundles b on b.id = r.bundle_id join api_keys k on k.id = r.api_key_id
            where r.id = ${id} for update of r`;
          if (!r || r.last_mailed_at > windowStart) return false;
          const events = await tx<{ what: string; size: number; at: Date }[]>`
            delete from request_events where request_id = ${id} and at <= ${t} returning what, size, at`;
          if (events.length === 0 || !r.email) return false;
          const key = addressKey(r.email);
          if (!(await mayMail(tx as unknown as Sql, key, day))) return false;
          events.sort((a, z) => a.at.getTime() - z.at.getTime());
          await outbox.enqueue(arrivalsMail({ to: r.email, label: r.label, shortCode: r.short_code, events, baseUrl: deps.baseUrl, unsubscribeUrl: deps.unsubscribeUrl(key) }), tx as unknown as Sql);
          await tx`update upload_requests set last_mailed_at = ${t} where id = ${id}`;
          return true;
        });
        if (sent) queued++;
      }
      return queued;
    },
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
