import type { Sql } from '../db/sql.ts';
import { createApiKey } from '../auth/api-keys.ts';
import { listApiKeys, revokeApiKey } from '../db/api-keys.ts';
import { isPlanName } from '../plans.ts';
import { CONTROL_CHARS, isEmail } from '../util/names.ts';
import { sqlUtc } from '../util/time.ts';

export class UsageError extends Error {}

const CONTROL = new RegExp(`[${CONTROL_CHARS}]`);
const CONTROL_ALL = new RegExp(CONTROL.source, 'g');

/**
 * `sluice keys create|list|revoke`: prints results to stdout, throws UsageError for bad input.
 * `tty`: stdout is a terminal (list then prints a header row).
 */
export async function keysCommand(sql: Sql, args: string[], out: (line: string) => void, tty = false): Promise<void> {
  const [action, ...rest] = args;
  if (action === 'create') {
    const flags = parseFlags(rest, ['plan', 'label', 'email', 'days']);
    const plan = flags.plan;
    if (plan === undefined || !isPlanName(plan)) throw new UsageError('--plan must be one of starter, power, max, premium');
    if (flags.email !== undefined && !isEmail(flags.email)) throw new UsageError(`invalid --email: ${flags.email}`);
    // `keys list` prints one tab-separated row per key: a label must not break its row.
    if (flags.label !== undefined && CONTROL.test(flags.label)) throw new UsageError('--label must not contain tabs, line breaks or other control characters');
    let days: number | null = null;
    if (flags.days !== undefined) {
      if (!/^[1-9]\d{0,4}$/.test(flags.days)) throw new UsageError(`invalid --days: ${flags.days}`);
      days = Number(flags.days);
    }
    const { key } = await createApiKey(sql, { plan, label: flags.label ?? null, email: flags.email ?? null, days });
    out(key);
    return;
  }
  if (action === 'list') {
    if (rest.length) throw new UsageError('usage: sluice keys list');
    // Column names for a person at a terminal; a script reading a pipe gets the key rows alone.
    if (tty) out(['prefix', 'label', 'plan', 'state', 'created', 'last used'].join('\t'));
    for (const k of await listApiKeys(sql)) {
      const label = (k.label ?? '').replace(CONTROL_ALL, ' ');
      out([k.prefix, label, k.plan, k.state, sqlUtc(k.created_at), k.last_used_at ? sqlUtc(k.last_used_at) : 'never'].join('\t'));
    }
    return;
  }
  if (action === 'revoke') {
    const [prefix] = rest;
    if (prefix === undefined || rest.length !== 1) throw new UsageError('usage: sluice keys revoke PREFIX');
    if (!(await revokeApiKey(sql, prefix))) throw new UsageError(`unknown key: ${prefix}`);
    out(`revoked ${prefix}`);
    return;
  }
  throw new UsageError('usage: sluice keys create --plan PLAN [--label TEXT] [--email ADDR] [--days N] | list | revoke PREFIX');
}

export function parseFlags(args: string[], allowed: string[]): Record<string, string> {
  const flags: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const m = /^--([a-z]+)(?:=(.*))?$/.exec(args[i]!);
    if (!m || !allowed.includes(m[1]!)) throw new UsageError(`unknown flag: ${args[i]}`);
    const value = m[2] ?? args[++i];
    if (value === undefined) throw new UsageError(`--${m[1]} needs a value`);
    if (m[1]! in flags) throw new UsageError(`--${m[1]} given twice`);
    flags[m[1]!] = value;
  }
  return flags;
}
