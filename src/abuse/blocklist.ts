import type { Sql } from '../db/sql.ts';
import { anyBlocked } from '../db/abuse.ts';

export const SHA256_RE = /^[0-9a-f]{64}$/;

/**
 * Whether any hash is blocked, asked at most once a second: uploads compute a SHA-256 only while
 * the list is not empty. A hash blocked since the last look is still caught: an upload not hashed
 * while it streamed is hashed from its part when it finishes (see inspector.ts).
 */
export function createBlocklistFlag(
  sql: Sql, ttlMs = 1000,
): { get(): boolean; fresh(): Promise<boolean>; within(maxAgeMs: number): Promise<boolean> } {
  let value = false;
  let at = 0;
  let pending: Promise<boolean> | null = null;
  const fresh = (): Promise<boolean> =>
    (pending ??= anyBlocked(sql)
      .then((any) => {
        value = any;
        at = Date.now();
        return value;
      })
      .finally(() => (pending = null)));
  return {
    /** The last known answer; starts a refresh when it is older than the TTL. */
    get() {
      if (Date.now() - at > ttlMs) fresh().catch(() => {});
      return value;
    },
    fresh,
    /**
     * An answer at most `maxAgeMs` old: a burst of small uploads asks the database a few times a
     * second, not once a file; a hash blocked that long ago is enforced.
     */
    within: (maxAgeMs) => (Date.now() - at <= maxAgeMs ? Promise.resolve(value) : fresh()),
  };
}
