import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import { claimDueMail, deleteOutboxMail, failOutboxMail, insertOutboxMail, retryOutboxMail } from '../db/mail-outbox.ts';
import type { Sealer } from '../util/sealer.ts';
import type { Mail, MailTransport } from './transport.ts';

/** Rows claimed per pass; a pass sends them one after another. */
const BATCH = 5;
/**
 * A claimed row is invisible to other workers this long: a crashed sender's mail comes back after
 * it. It must outlast a whole batch of slow sends (nodemailer's connection, greeting and socket
 * timeouts add up to about a minute per mail at worst), or another process would send it again.
 */
const LEASE_SECONDS = 900;
/** After this long in the outbox a mail that still fails is marked failed (kept for the operator). */
const GIVE_UP_HOURS = 72;
const SEAL_CONTEXT = 'mail-outbox';

/** Seconds to wait after the n-th failed attempt: 30 s, 1 min, 2 min … capped at one hour. */
export const retryDelaySeconds = (attempts: number): number => Math.min(30 * 2 ** Math.max(0, attempts - 1), 3600);

export interface Outbox {
  /**
   * Queues a mail (inside the caller's transaction when one is passed, so it is sent if and only if
   * that transaction commits). Never sends: the worker does.
   */
  enqueue(mail: Mail, tx?: Sql): Promise<void>;
  /** One pass: claims due rows (`for update skip locked`, so workers in several processes share the table) and sends them. */
  deliverDue(): Promise<{ sent: number; failed: number }>;
}

export function createOutbox(deps: { sql: Sql; sealer: Sealer; transport: MailTransport; from: string; log: Logger }): Outbox {
  const { sql, sealer, transport, from, log } = deps;
  return {
    async enqueue(mail, tx = sql) {
      // Bodies may carry a freshly minted API key: they rest sealed, and the row goes once delivered.
      const body = sealer.seal(JSON.stringify({ text: mail.text, html: mail.html, headers: mail.headers }), SEAL_CONTEXT);
      await insertOutboxMail(tx, mail.to, mail.subject, body);
    },

    async deliverDue() {
      const rows = await claimDueMail(sql, BATCH, LEASE_SECONDS, GIVE_UP_HOURS);
      let sent = 0;
      let failed = 0;
      for (const row of rows) {
        try {
          const { text, html, headers } = JSON.parse(sealer.open(row.body, SEAL_CONTEXT)) as {
            text: string; html: string; headers?: Record<string, string>;
          };
          await transport.send({
            from,
            to: row.to_addr,
            subject: row.subject,
            text,
            html,
            headers,
            // Stable per row: a mail re-sent after a crash between "accepted" and "deleted" is recognisably the same.
            messageId: `<outbox-${row.id}-${row.created_at.getTime()}@sluice>`,
          });
          await deleteOutboxMail(sql, row.id);
          sent++;
        } catch (err) {
          failed++;
          const message = String((err as Error)?.message ?? err).slice(0, 500);
          if (row.give_up) {
            log.error({ err, mailId: row.id, attempts: row.attempts }, 'mail failed for 72 hours; giving up');
            // Kept for the operator to see, without the body (it may carry an API key).
            await failOutboxMail(sql, row.id, message);
          } else {
            const delay = retryDelaySeconds(row.attempts);
            log.warn({ err, mailId: row.id, attempts: row.attempts, retryInSeconds: delay }, 'mail not sent; will retry');
            await retryOutboxMail(sql, row.id, message, delay);
          }
        }
      }
      return { sent, failed };
    },
  };
}
