/** Markup and sizes as pages and mails show them: escaping is the one rule, and it lives here. */

/** HTML that is already escaped (or trusted markup): interpolated as is. */
export interface Safe {
  readonly __html: string;
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Safe in text and in quoted attribute values. */
export const escapeHtml = (s: string): string => s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

/** Marks trusted markup: never pass user input here. */
export const safe = (markup: string): Safe => ({ __html: markup });

const isSafe = (v: unknown): v is Safe => typeof v === 'object' && v !== null && typeof (v as Safe).__html === 'string';

function render(v: unknown): string {
  if (v === null || v === undefined || v === false) return '';
  if (isSafe(v)) return v.__html;
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(String(v));
}

/** Tagged template: every interpolation is escaped unless it is Safe (arrays are rendered item by item). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Safe {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1]!;
  return safe(out);
}

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** 1536 → "1.5 KB" (powers of 1024, as the size caps are). */
export function humanSize(bytes: number): string {
  let n = bytes;
  let u = 0;
  while (n >= 1024 && u < UNITS.length - 1) {
    n /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${n < 10 ? n.toFixed(1).replace(/\.0$/, '') : Math.round(n)} ${UNITS[u]}`;
}

export const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;
