import { AppError } from '../errors.ts';

/** The most days a bundle of a plan whose bundles never expire may choose at upload: ten years. */
const LONGEST_CHOSEN_DAYS = 3650;

/** The most `expires_in_days` a caller whose bundles last `planDays` (null: never expire) may ask for. */
export const longestExpiryDays = (planDays: number | null): number => planDays ?? LONGEST_CHOSEN_DAYS;

/**
 * A new bundle's expiry in days from `expires_in_days` as sent at upload: '' or absent keeps the
 * plan's (`planDays`, null: never). A value may only shorten it: a whole number from 1 to the
 * plan's days (1 to 3650 when the plan's bundles never expire); INVALID_EXPIRY otherwise.
 */
export function parseExpiryDays(raw: string | undefined, planDays: number | null): number | null {
  if (raw === undefined || raw === '') return planDays;
  const most = longestExpiryDays(planDays);
  if (!/^[1-9]\d{0,3}$/.test(raw) || Number(raw) > most) {
    throw new AppError('INVALID_EXPIRY', `expires_in_days must be a whole number from 1 to ${most}`);
  }
  return Number(raw);
}
