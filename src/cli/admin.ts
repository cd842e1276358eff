import type { Sql } from '../db/sql.ts';
import { createAdminAuth } from '../auth/admin-sessions.ts';
import { createSigner } from '../auth/signing.ts';
import { listAdminSessions, revokeAdminSessions } from '../db/admin-sessions.ts';
import { CONTROL_CHARS } from '../util/names.ts';
import { sqlUtc } from '../util/time.ts';
import { parseFlags, UsageError } from './keys.ts';

const USAGE = 'usage: sluice admin link [--label NAME] [--minutes N] | sessions | revoke ID|all';

/** `sluice admin link|sessions|revoke`: the operator console's sign-in links and sessions. */
export async function adminCommand(o: { sql: Sql; secret: Buffer; origin: string; args: string[]; operator: string; out: (line: string) => void }): Promise<void> {
  const [action, ...rest] = o.args;
  if (action === 'link') {
    const flags = parseFlags(rest, ['label', 'minutes']);
    const label = flags.label ?? o.operator;
    if (label.trim() === '' || new RegExp(`[${CONTROL_CHARS}]`).test(label)) throw new UsageError('--label must be a name on one line');
    const minutes = flags.minutes === undefined ? 15 : Number(flags.minutes);
    if (!/^\d+$/.test(flags.minutes ?? '15') || minutes < 1 || minutes > 1440) throw new UsageError('--minutes must be a whole number from 1 to 1440');
    const token = await createAdminAuth({ sql: o.sql, signer: createSigner(o.secret) }).mintLink(label, minutes);
    o.out(`${o.origin}/admin/login/${token}`);
    return;
  }
  if (action === 'sessions' && rest.length === 0) {
    for (const s of await listAdminSessions(o.sql)) {
      o.out([s.id, s.label, sqlUtc(s.created_at), sqlUtc(s.expires_at), s.last_seen_at ? sqlUtc(s.last_seen_at) : 'never'].join('\t'));
    }
    return;
  }
  if (action === 'revoke' && rest.length === 1) {
    const which = rest[0]!;
    if (which !== 'all' && !/^\d{1,15}$/.test(which)) throw new UsageError(USAGE);
    const n = await revokeAdminSessions(o.sql, which === 'all' ? null : Number(which));
    if (which !== 'all' && n === 0) throw new UsageError(`no live session ${which}`);
    o.out(`ended ${n} session${n === 1 ? '' : 's'}`);
    return;
  }
  throw new UsageError(USAGE);
}
