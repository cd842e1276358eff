import type { Logger } from 'pino';
import type { Sql } from '../db/client.ts';
import type { Outbox } from '../mail/outbox.ts';
import { downloadsMail } from '../mail/messages.ts';
import { addressKey, forgetOldDays, mayMail } from './recipients.ts';
import { dueBundles, insertDownloadEvent, mailDownloadEvents } from '../db/notify-events.ts';

/** At most one notification mail per bundle in this window; downloads in between are batched. */
export const NOTIFY_WINDOW_MS = 10 * 60_000;

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

/** What a notifier of batched mails needs; `now` is injectable so tests can move time. */
export interface NotifierDeps {
  sql: Sql;
  outbox: Outbox;
  log: Logger;
  /** Read when a mail is written (the server's origin is known only once it listens on PORT=0). */
  readonly baseUrl: string;
  /** The signed one-click unsubscribe URL of an address key. */
  unsubscribeUrl: (addressKey: string) => string;
  now?: () => Date;
  /** Called after an event was recorded (the server kicks its background loop). */
  recorded?: () => void;
}

export function createDownloadNotifier(deps: NotifierDeps): DownloadNotifier {
  const { sql, outbox, log } = deps;
  const now = deps.now ?? (() => new Date());
  return {
    async downloaded(bundleId, notifyEmail, what, zipFiles) {
      if (notifyEmail === null) return;
      await insertDownloadEvent(sql, bundleId, what, zipFiles ?? null, now()).then(
        () => deps.recorded?.(),
        (err: unknown) => log.warn({ err, bundleId }, 'download event not recorded'),
      );
    },

    async flush() {
      const t = now();
      const windowStart = new Date(t.getTime() - NOTIFY_WINDOW_MS);
      const day = t.toISOString().slice(0, 10);
      await forgetOldDays(sql, day);
      let queued = 0;
      for (const bundleId of await dueBundles(sql, t, windowStart)) {
        const sent = await mailDownloadEvents(sql, bundleId, t, windowStart, async (tx, b, events) => {
          if (events.length === 0 || !b?.notify_email) return false;
          const key = addressKey(b.notify_email);
          if (!(await mayMail(tx, key, day))) return false;
          events.sort((a, z) => a.at.getTime() - z.at.getTime());
          const mail = downloadsMail({
            to: b.notify_email,
            shortCode: b.short_code,
            events: events.map((e) => ({ what: e.what, zipFiles: e.zip_files, at: e.at })),
            baseUrl: deps.baseUrl,
            unsubscribeUrl: deps.unsubscribeUrl(key),
          });
          await outbox.enqueue(mail, tx);
          return true;
        });
        if (sent) queued++;
      }
      return queued;
    },
  };
}
