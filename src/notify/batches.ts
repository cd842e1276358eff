import type { Logger } from 'pino';
import type { Outbox } from '../mail/outbox.ts';
import type { Sql } from '../db/sql.ts';
import type { SendBatch } from '../db/notify-events.ts';
import type { Mail } from '../mail/transport.ts';
import { addressKey, forgetOldDays, mayMail } from './recipients.ts';


/** At most one notification mail per subject (a bundle, a request) in this window; events in between are batched. */
export const NOTIFY_WINDOW_MS = 10 * 60_000;

/** How one kind of batched notification finds its subjects, locks one with its events, and words its mail. */
export interface BatchKind<R, E extends { at: Date }> {
  due(sql: Sql, t: Date, windowStart: Date): Promise<number[]>;
  lockAndSend(sql: Sql, id: number, t: Date, windowStart: Date, send: SendBatch<R, E>): Promise<boolean>;
  address(row: R): string | null | undefined;
  mail(row: R, to: string, events: E[], unsubscribeUrl: string): Mail;
}

/**
 * Queues one mail per subject whose events wait and whose last mail is older than the window,
 * unless its address unsubscribed or had its day's mails (those events are dropped); returns how many.
 */
export async function flushBatches<R, E extends { at: Date }>(deps: NotifierDeps, kind: BatchKind<R, E>, t: Date): Promise<number> {
  const windowStart = new Date(t.getTime() - NOTIFY_WINDOW_MS);
  const day = t.toISOString().slice(0, 10);
  await forgetOldDays(deps.sql, day);
  let queued = 0;
  for (const id of await kind.due(deps.sql, t, windowStart)) {
    const sent = await kind.lockAndSend(deps.sql, id, t, windowStart, async (tx, row, events) => {
      const to = kind.address(row);
      if (events.length === 0 || !to) return false;
      if (!(await mayMail(tx, to, day))) return false;
      const key = addressKey(to);
      events.sort((a, z) => a.at.getTime() - z.at.getTime());
      await deps.outbox.enqueue(kind.mail(row, to, events, deps.unsubscribeUrl(key)), tx);
      return true;
    });
    if (sent) queued++;
  }
  return queued;
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
