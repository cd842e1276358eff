import { createHash } from 'node:crypto';
import type { Sql } from '../db/sql.ts';
import { deleteOldMailDays, insertUnsubscribe, takeMailBudget } from '../db/mail-recipients.ts';

/**
 * Download notifications go to an address the uploader typed and nobody verified: per address,
 * across all bundles, at most this many mails a UTC day (downloads past it that day are not mailed),
 * and none once the address used its unsubscribe link.
 */
export const MAILS_PER_ADDRESS_PER_DAY = 20;

/**
 * The mailbox an address reaches: trimmed, lower-cased, without a `+tag` in its local part
 * (victim+1@example.com and Victim@Example.com are victim@example.com), so neither case nor tags
 * multiply an address's daily budget or escape its unsubscribe.
 */
export function mailboxOf(address: string): string {
  const a = address.trim().toLowerCase();
  const at = a.lastIndexOf('@');
  const plus = a.indexOf('+');
  return plus > 0 && plus < at ? a.slice(0, plus) + a.slice(at) : a;
}

const sha256Hex = (text: string): string => createHash('sha256').update(text).digest('hex');

/** How an address is counted, stored and signed: SHA-256 of its mailbox (mailboxOf), in hex. */
export const addressKey = (address: string): string => sha256Hex(mailboxOf(address));

const keyBytes = (key: string): Buffer => Buffer.from(key, 'hex');

/** Honoured for the address from then on; recording it twice is fine. */
export async function unsubscribe(sql: Sql, key: string): Promise<void> {
  await insertUnsubscribe(sql, keyBytes(key));
}

/**
 * Takes one mail from the address's (its mailbox's) budget of day `day` (YYYY-MM-DD, UTC) inside the caller's
 * transaction: false when it unsubscribed or the day's budget is spent (nothing is counted then).
 */
export async function mayMail(tx: Sql, address: string, day: string): Promise<boolean> {
  // Unsubscribe links sent before tags were folded name the address as typed: honoured too.
  const asTyped = sha256Hex(address.trim().toLowerCase());
  return takeMailBudget(tx, keyBytes(addressKey(address)), day, MAILS_PER_ADDRESS_PER_DAY, keyBytes(asTyped));
}

/** Drops the counts of days before `day`: only today's (and yesterday's, for clocks near midnight) matter. */
export async function forgetOldDays(sql: Sql, day: string): Promise<void> {
  await deleteOldMailDays(sql, day);
}
