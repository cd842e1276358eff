// A new API key's fields, checked the same way wherever a key is minted (`sluice keys create`, the
// operator console), and the console's audited mint.
import type { Sql } from '../db/sql.ts';
import { audit } from '../db/abuse.ts';
import type { ApiKeyRow } from '../db/api-keys.ts';
import { isPlanName, PLANS, type PlanName } from '../plans.ts';
import { CONTROL_CHARS, isEmail } from '../util/names.ts';
import { createApiKey } from './api-keys.ts';

export interface KeyRequest {
  readonly plan: PlanName;
  readonly label: string | null;
  readonly email: string | null;
  /** A one-time pass's length in days; null: no end. */
  readonly days: number | null;
}

/** The fields as given (a flag or form field left out is undefined). */
export interface KeyFields {
  readonly plan?: string;
  readonly label?: string;
  readonly email?: string;
  readonly days?: string;
}

const CONTROL = new RegExp(`[${CONTROL_CHARS}]`);

/**
 * Checks a new key's fields. `name` says how a message names a field (`--plan` for the CLI). A
 * label never holds control characters: `keys list` prints one tab-separated row per key.
 */
export function checkKeyFields(f: KeyFields, name: (field: string) => string = (x) => x): { ok: true; key: KeyRequest } | { ok: false; error: string } {
  const fail = (error: string): { ok: false; error: string } => ({ ok: false, error });
  if (f.plan === undefined || !isPlanName(f.plan)) return fail(`${name('plan')} must be one of ${Object.keys(PLANS).join(', ')}`);
  if (f.email !== undefined && !isEmail(f.email)) return fail(`invalid ${name('email')}: ${f.email}`);
  if (f.label !== undefined && CONTROL.test(f.label)) return fail(`${name('label')} must not contain tabs, line breaks or other control characters`);
  if (f.days !== undefined && !/^[1-9]\d{0,4}$/.test(f.days)) return fail(`invalid ${name('days')}: ${f.days}`);
  return { ok: true, key: { plan: f.plan, label: f.label ?? null, email: f.email ?? null, days: f.days === undefined ? null : Number(f.days) } };
}

/**
 * Mints a key and its audit record (`keys create`, by its prefix) in one transaction; `form`, the
 * console form it comes from (see createApiKey).
 */
export function mintKeyAudited(sql: Sql, k: KeyRequest, operator: string, form: string | null = null): Promise<{ key: string; row: ApiKeyRow }> {
  const detail = [`plan ${k.plan}`, k.label === null ? null : `label ${k.label}`, k.days === null ? null : `${k.days} days`].filter(Boolean).join('; ');
  return createApiKey(sql, { ...k, form }, (tx, row) => audit(tx, 'keys create', row.prefix, operator, detail));
}
