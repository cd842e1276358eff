import type { Sql } from '../db/sql.ts';
import type { Caller } from '../auth/caller.ts';
import { AppError } from '../errors.ts';
import { SHORT_CODE_RE } from '../util/tokens.ts';
import { codeOfVanity } from '../db/vanity.ts';

/** A vanity name: ASCII only, so no look-alike of another name can be registered. */
export const VANITY_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{2,47}$/;

/**
 * Names refused beside every first path segment the route table serves: paths other servers and
 * proxies in front of this one commonly answer, and words a visitor would take for the site's own.
 */
const ALWAYS_RESERVED = [
  'admin', 'administrator', 'login', 'logout', 'signin', 'signup', 'register', 'account', 'accounts', 'settings',
  'static', 'assets', 'public', 'favicon.ico', 'robots.txt', 'sitemap.xml', 'humans.txt', 'security.txt',
  'manifest.json', 'sw.js', '.well-known', 'apple-touch-icon.png', 'api', 'www', 'mail', 'help', 'about', 'docs',
  'privacy', 'terms', 'pricing', 'billing', 'status', 'metrics', 'health', 'dashboard', 'root', 'sluice',
];

/** The lower-cased first path segments of `patterns` (`/zip/:code` gives `zip`), plus the fixed list. */
export function reservedNames(patterns: Iterable<string>): Set<string> {
  const names = new Set(ALWAYS_RESERVED);
  for (const p of patterns) {
    const first = p.split('/')[1] ?? '';
    if (first !== '' && !first.startsWith(':') && first !== '*') names.add(first.toLowerCase());
  }
  return names;
}

/**
 * Checks a requested name against the pattern and the reserved words; the caller must hold a
 * Premium key (401 without a key, 403 with another plan). A name shaped like a short code (five
 * letters or digits) is refused as reserved: `/<it>` would open the bundle of that code instead.
 */
export function checkVanity(name: string, caller: Caller, reserved: ReadonlySet<string>): string {
  vanityPlan(caller);
  if (!VANITY_RE.test(name)) throw new AppError('INVALID_VANITY');
  if (reserved.has(name.toLowerCase()) || SHORT_CODE_RE.test(name)) throw new AppError('VANITY_RESERVED');
  return name;
}

/** The caller may name bundles: 401 anonymous (or a rejected key), 403 a key of another plan. */
export function vanityPlan(caller: Caller): void {
  if (!caller.apiKey) throw new AppError(caller.bearerRejected ? 'INVALID_API_KEY' : 'VANITY_NEEDS_KEY');
  if (caller.apiKey.plan !== 'premium') throw new AppError('VANITY_NEEDS_PREMIUM');
}

/**
 * The short code a one-segment path names: itself when it has a short code's shape, else the code
 * of the live bundle holding it as its vanity name; undefined for neither. Every path that serves a
 * bundle by `/<code>` resolves through here, so a vanity name opens exactly what its code opens.
 */
export async function resolveCode(sql: Sql, segment: string): Promise<string | undefined> {
  if (SHORT_CODE_RE.test(segment)) return segment;
  if (!VANITY_RE.test(segment)) return undefined;
  return codeOfVanity(sql, segment);
}

/** A one-segment path that could name a bundle: its misses spend the miss budget. */
export const couldNameBundle = (segment: string): boolean => SHORT_CODE_RE.test(segment) || VANITY_RE.test(segment);

export const vanityUrl = (vanity: string | null | undefined): string | null => (vanity ? `/${vanity}` : null);
