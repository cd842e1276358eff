import type { Sql } from './sql.ts';
import { audit } from './abuse.ts';

/**
 * Revokes the key with this prefix and records `keys revoke` (as `sluice keys revoke` does) in one
 * transaction: recorded if and only if this call revoked it. Every request with the key is refused
 * from the commit on: keys are looked up on each request, never cached.
 */
export function revokeKeyAudited(sql: Sql, prefix: string, operator: string): Promise<'revoked' | 'already' | 'unknown'> {
  return sql.begin(async (q) => {
    const tx = q as unknown as Sql;
    const [row] = await tx<{ revoked: boolean }[]>`select revoked_at is not null as revoked from api_keys where prefix = ${prefix} for update`;
    if (!row) return 'unknown';
    if (row.revoked) return 'already';
    await tx`update api_keys set revoked_at = now() where prefix = ${prefix}`;
    await audit(tx, 'keys revoke', prefix, operator);
    return 'revoked';
  }) as Promise<'revoked' | 'already' | 'unknown'>;
}
