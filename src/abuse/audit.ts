import os from 'node:os';
import type { Sql } from '../db/client.ts';

export interface AuditRow {
  id: number;
  at: Date;
  action: string;
  target: string;
  operator: string;
  detail: string | null;
}

/** Records one operator action; `tx` lets the record commit with the action itself. */
export async function audit(tx: Sql, action: string, target: string, operator: string, detail: string | null = null): Promise<void> {
  await tx`insert into audit (action, target, operator, detail) values (${action}, ${target}, ${operator}, ${detail})`;
}

/** Oldest first, from `since` on (everything when null). */
export const listAudit = (sql: Sql, since: Date | null): Promise<AuditRow[]> =>
  sql<AuditRow[]>`select * from audit where ${since === null ? sql`true` : sql`at >= ${since}`} order by at, id`;

/** Who runs a CLI command: `--by NAME`, else the OS user (SUDO_USER first: the person behind sudo). */
export function operatorName(by: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  if (by !== undefined && by.trim() !== '') return by.trim();
  const sudo = env.SUDO_USER;
  if (sudo) return sudo;
  try {
    return os.userInfo().username;
  } catch {
    return env.USER ?? 'unknown';
  }
}
