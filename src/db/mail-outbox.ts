import type { Sql } from './sql.ts';

export interface OutboxRow {
  id: number;
  to_addr: string;
  subject: string;
  body: Uint8Array;
  attempts: number;
  created_at: Date;
  give_up: boolean;
}

/** Queues a sealed mail; `tx` may be the caller's transaction (the mail is sent if and only if it commits). */
export async function insertOutboxMail(tx: Sql, to: string, subject: string, body: Uint8Array): Promise<void> {
  await tx`insert into mail_outbox (to_addr, subject, body) values (${to}, ${subject}, ${body})`;
}

/**
 * Claims up to `batch` due rows for `leaseSeconds` (`for update skip locked`, so workers in several
 * processes share the table), counting the attempt; `give_up` is set on rows older than `giveUpHours`.
 */
export function claimDueMail(sql: Sql, batch: number, leaseSeconds: number, giveUpHours: number): Promise<OutboxRow[]> {
  return sql<OutboxRow[]>`
    update mail_outbox set attempts = attempts + 1,
                           next_attempt_at = now() + make_interval(secs => ${leaseSeconds})
    where id in (select id from mail_outbox
                 where failed_at is null and next_attempt_at <= now()
                 order by next_attempt_at, id limit ${batch}
                 for update skip locked)
    returning id, to_addr, subject, body, attempts, created_at,
              created_at < now() - make_interval(hours => ${giveUpHours}) as give_up`;
}

export async function deleteOutboxMail(sql: Sql, id: number): Promise<void> {
  await sql`delete from mail_outbox where id = ${id}`;
}

/** Marks a mail failed for good, kept for the operator without its body (it may carry an API key). */
export async function failOutboxMail(sql: Sql, id: number, message: string): Promise<void> {
  await sql`update mail_outbox set failed_at = now(), last_error = ${message}, body = ''::bytea where id = ${id}`;
}

export async function retryOutboxMail(sql: Sql, id: number, message: string, delaySeconds: number): Promise<void> {
  await sql`update mail_outbox set last_error = ${message}, next_attempt_at = now() + make_interval(secs => ${delaySeconds})
            where id = ${id}`;
}
