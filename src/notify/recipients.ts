import { createHash } from 'node:crypto';
import type { Sql } from '../db/client.ts';
import { deleteOldMailDays, insertUnsubscribe, takeMailBudget } from '../db/mail-recipients.ts';

/**
 * Download notifications go to an address the uploader typed and nobody verified: per address,
 * across all bundles, at most this many mails a UTC day (downloads past it that day are not mailed),
 * and none once the address used its unsubscribe link.
 */
export const MAILS_PER_ADDRESS_PER_DAY = 20;

/** How an address is stored and signed: SHA-256 of its trimmed, lower-cased text, in hex. */
export const addressKey = (address: string): string => createHash('sha256').update(address.trim().toLowerCase()).digest('hex');

const keyBytes = (key: string): Buffer => Buffer.from(key, 'hex');

/** Honoured for the address from then on; recording it twice is fine. */
export async function unsubscribe(sql: Sql, key: string): Promise<void> {
  await insertUnsubscribe(sql, keyBytes(key));
}

/**
 * Takes one mail from the address's budget of day `day` (YYYY-MM-DD, UTC) inside the caller's
 * transaction: false when it unsubscribed or the day's budget is spent (nothing is counted then).
 */
export async function mayMail(tx: Sql, key: string, day: string): Promise<boolean> {
  return takeMailBudget(tx, keyBytes(key), day, MAILS_PER_ADDRESS_PER_DAY);
}

/** Drops the counts of days before `day`: only today's (and yesterday's, for clocks near midnight) matter. */
export async function forgetOldDays(sql: Sql, day: string): Promise<void> {
  await deleteOldMailDays(sql, day);
}
