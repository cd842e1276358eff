import type { Sql } from './sql.ts';

/** Records an unsubscribed address key; recording it twice is fine. */
export async function insertUnsubscribe(sql: Sql, key: Buffer): Promise<void> {
  await sql`insert into mail_unsubscribes (address_key) values (${key}) on conflict (address_key) do nothing`;
}

/**
 * Takes one mail from the address's budget of day `day` inside the caller's transaction: false when
 * it unsubscribed or `perDay` mails were already counted that day (nothing is counted then).
 */
export async function takeMailBudget(tx: Sql, key: Buffer, day: string, perDay: number, alsoOff: Buffer = key): Promise<boolean> {
  const [off] = await tx<{ x: number }[]>`select 1 as x from mail_unsubscribes where address_key in (${key}, ${alsoOff})`;
  if (off) return false;
  const [counted] = await tx<{ sent: number }[]>`
    insert into mail_address_days (address_key, day, sent) values (${key}, ${day}, 1)
    on conflict (address_key, day) do update set sent = mail_address_days.sent + 1
    where mail_address_days.sent < ${perDay}
    returning sent`;
  return counted !== undefined;
}

/** Drops the counts of days before the day before `day`. */
export async function deleteOldMailDays(sql: Sql, day: string): Promise<void> {
  await sql`delete from mail_address_days where day < (${day}::date - 1)`;
}
