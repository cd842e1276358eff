import { createHmac } from 'node:crypto';
import { AppError } from '../errors.ts';
import { cleanText, CONTROL_CHARS } from '../util/names.ts';

import { REASONS, type Reason } from '../db/abuse.ts';
/** Long enough for a URL list and a paragraph of context; bounds what each mail and listing holds. */
export const MAX_DETAILS = 4000;
export const MAX_CONTACT = 255;
const CONTROL = new RegExp(`[${CONTROL_CHARS}]`);

export interface ReportInput {
  shortCode: string;
  reason: Reason;
  details: string | null;
  contact: string | null;
}

/** Checks the fields of a report (the code is checked against the database by the caller). */
export function reportInput(fields: Record<string, unknown>): Omit<ReportInput, 'shortCode'> {
  const reason = fields.reason;
  if (typeof reason !== 'string' || !(REASONS as readonly string[]).includes(reason)) throw new AppError('INVALID_REASON');
  const text = (v: unknown, what: string): string | null => {
    if (v === undefined || v === null || v === '') return null;
    if (typeof v !== 'string') throw new AppError('INVALID_FIELD', `${what} must be a string`);
    return v;
  };
  const given = text(fields.details, 'details');
  const details = given === null ? null : cleanText(given) || null;
  // Characters, not bytes: the limit a person can count in the form.
  if (details !== null && [...details].length > MAX_DETAILS) throw new AppError('DETAILS_TOO_LONG');
  const rawContact = text(fields.contact, 'contact')?.trim() ?? '';
  if (rawContact.length > MAX_CONTACT || CONTROL.test(rawContact)) throw new AppError('INVALID_CONTACT');
  const contact = cleanText(rawContact).trim() || null;
  return { reason: reason as Reason, details, contact };
}

/** The reporter's address as a keyed hash: repeat reporters can be told apart, no address is kept. */
export const reporterHash = (secret: Buffer | string, address: string): Buffer =>
  createHmac('sha256', secret).update(`report:${address}`).digest();
