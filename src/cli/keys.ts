import type { Sql } from '../db/sql.ts';
import { listApiKeys } from '../db/api-keys.ts';
import { checkKeyFields, mintKeyAudited } from '../auth/key-request.ts';
import { revokeKeyAudited } from '../db/key-actions.ts';
import { CONTROL_CHARS } from '../util/names.ts';
import { sqlUtc } from '../util/time.ts';

export class UsageError extends Error {}

const CONTROL_ALL = new RegExp(`[${CONTROL_CHARS}]`, 'g');

/**
 * `sluice keys create|list|revoke`: prints results to stdout, throws UsageError for bad input.
 * `tty`: stdout is a terminal (list then prints a header row). Minting and revoking are audited
 * under `operator`, in the same transaction, as the console's are.
 */
export async function keysCommand(sql: Sql, args: string[], out: (line: string) => void, tty: boolean, operator: string): Promise<void> {
  const [action, ...rest] = args;
  if (action === 'create') {
    const checked = checkKeyFields(parseFlags(rest, ['plan', 'label', 'email', 'days']), (f) => `--${f}`);
    if (!checked.ok) throw new UsageError(checked.error);
    const { key } = await mintKeyAudited(sql, checked.key, operator);
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
    if ((await revokeKeyAudited(sql, prefix, operator)) === 'unknown') throw new UsageError(`unknown key: ${prefix}`);
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
