const pad = (n: number): string => String(n).padStart(2, '0');

/** `2026-11-22T10:00:00+00:00`: upload responses. */
export function isoUtc(d: Date): string {
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T${pad(d.getUTCHours())}:${pad(
    d.getUTCMinutes(),
  )}:${pad(d.getUTCSeconds())}+00:00`;
}

/** `2026-11-22 10:00:00` (UTC): bundle info, status and /my responses. */
export function sqlUtc(d: Date): string {
  return isoUtc(d).slice(0, 19).replace('T', ' ');
}

export const DAY_MS = 86_400_000;
