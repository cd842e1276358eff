import { createHash } from 'node:crypto';
import type { BlobCache } from '../storage/blob-store.ts';
import type { Logger } from 'pino';
import type { Limiter } from '../util/limit.ts';
import type { Renderer } from './render-process.ts';
import { humanSize, plural } from '../util/html.ts';

export const CARD_W = 1200;
export const CARD_H = 630;
/** Bumped whenever the drawing changes, so cached cards of the same fields are not reused. */
const CARD_VERSION = 'c1';

/** What a share card shows. No file names: a link preview is seen by whoever the link is pasted to. */
export interface CardFields {
  readonly files: string;
  readonly size: string;
  readonly expiry: string;
}

/** "never expires", "expires in 5 hours", "expires in 2 days", or a date past a month. */
export function expiryText(expiresAt: Date | null, nowMs: number): string {
  if (expiresAt === null) return 'never expires';
  const left = expiresAt.getTime() - nowMs;
  const hours = Math.floor(left / 3_600_000);
  if (hours < 1) return `expires in ${plural(Math.max(1, Math.ceil(left / 60_000)), 'minute')}`;
  if (hours < 48) return `expires in ${plural(hours, 'hour')}`;
  const days = Math.floor(hours / 24);
  if (days <= 30) return `expires in ${plural(days, 'day')}`;
  return `expires on ${expiresAt.toISOString().slice(0, 10)}`;
}

export function cardFields(b: { file_count: number; total_size_bytes: number; expires_at: Date | null }, nowMs: number): CardFields {
  return { files: plural(b.file_count, 'file'), size: humanSize(b.total_size_bytes), expiry: expiryText(b.expires_at, nowMs) };
}

/** Escapes text for an XML text node or attribute value. */
export function xmlEscape(s: string): string {
  return s.replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function cardSvg(f: CardFields): string {
  const t = (x: number, y: number, size: number, weight: number, fill: string, text: string): string =>
    `<text x="${x}" y="${y}" font-family="DejaVu Sans, sans-serif" font-size="${size}" font-weight="${weight}" fill="${fill}">${xmlEscape(text)}</text>`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${CARD_W}" height="${CARD_H}" viewBox="0 0 ${CARD_W} ${CARD_H}">`,
    '<defs><linearGradient id="g" x1="0" y1="0" x2="1" y2="1">',
    '<stop offset="0" stop-color="#312e81"/><stop offset="1" stop-color="#4f46e5"/></linearGradient></defs>',
    `<rect width="${CARD_W}" height="${CARD_H}" fill="url(#g)"/>`,
    '<rect x="80" y="96" width="14" height="120" rx="7" fill="#a5b4fc"/>',
    t(124, 196, 112, 700, '#ffffff', 'Sluice'),
    t(84, 360, 64, 600, '#eef2ff', `${f.files} · ${f.size}`),
    t(84, 450, 44, 400, '#c7d2fe', f.expiry),
    t(84, 560, 30, 400, '#a5b4fc', 'Shared with Sluice'),
    '</svg>',
  ].join('');
}

export interface OgCards {
  /** PNG bytes and a strong ETag for one bundle's card; cached in the store's cache area. */
  card(code: string, fields: CardFields): Promise<{ bytes: Buffer; etag: string }>;
}

export function createOgCards(deps: { renderer: Renderer; limiter: Limiter; cache: BlobCache; log: Logger }): OgCards {
  const { renderer, limiter, cache, log } = deps;

  return {
    async card(code, fields) {
      const hash = createHash('sha256').update(JSON.stringify([CARD_VERSION, fields])).digest('hex').slice(0, 24);
      const etag = `"${CARD_VERSION}-${hash}"`;
      const name = `og/${code}-${hash}.png`;
      const cached = await cache.get(name);
      if (cached) return { bytes: cached, etag };
      // The SVG is ours, built from numbers and escaped text: the only SVG this server rasterizes.
      const bytes = await limiter.run(() => renderer.card(cardSvg(fields)));
      // Best effort: a card not cached is drawn again next time.
      await cache.put(name, bytes).catch((err: unknown) => log.warn({ err, name }, 'share card not cached'));
      return { bytes, etag };
    },
  };
}
