import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import type { Outbox } from '../mail/outbox.ts';
import { downloadsMail } from '../mail/messages.ts';
import { flushBatches, type NotifierDeps } from './batches.ts';
import { dueBundles, insertDownloadEvent, mailDownloadEvents } from '../db/notify-events.ts';

export { NOTIFY_WINDOW_MS } from './batches.ts';

export interface DownloadNotifier {
  /**
   * Records one finished download of a bundle that has a notify_email: a file, by its name, or with
   * `zipFiles` the whole bundle as a zip named `what`. Callers do not wait for it; it never rejects
   * (a lost event costs one line of a notification, never a download).
   */
  downloaded(bundleId: number, notifyEmail: string | null, what: string, zipFiles?: number): Promise<void>;
  /**
   * Queues one mail per bundle whose events are waiting and whose last mail is at least 10 minutes
   * old, unless its address unsubscribed or had its day's mails (see recipients.ts): those events are dropped.
   */
  flush(): Promise<number>;
}

export function createDownloadNotifier(deps: NotifierDeps): DownloadNotifier {
  const { sql, log } = deps;
  const now = deps.now ?? (() => new Date());
  return {
    async downloaded(bundleId, notifyEmail, what, zipFiles) {
      if (notifyEmail === null) return;
      await insertDownloadEvent(sql, bundleId, what, zipFiles ?? null, now()).then(
        () => deps.recorded?.(),
        (err: unknown) => log.warn({ err, bundleId }, 'download event not recorded'),
      );
    },

    flush: () =>
      flushBatches(deps, {
        due: dueBundles,
        lockAndSend: mailDownloadEvents,
        address: (b) => b?.notify_email,
        mail: (b, to, events, unsubscribeUrl) =>
          downloadsMail({
            to,
            shortCode: b!.short_code,
            events: events.map((e) => ({ what: e.what, zipFiles: e.zip_files, at: e.at })),
            baseUrl: deps.baseUrl,
            unsubscribeUrl,
          }),
      }, now()),
  };
}
