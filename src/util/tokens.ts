import { createHash, timingSafeEqual } from 'node:crypto';
import { randomBytesPooled, randomHex } from './random.ts';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export const SHORT_CODE_RE = /^[a-zA-Z0-9]{5}$/;
export const UPLOAD_TOKEN_RE = /^[0-9a-f]{64}$/;

/** 5 base62 characters from the CSPRNG, without modulo bias (bytes ≥ 248 are redrawn). */
export function newShortCode(): string {
  let out = '';
  while (out.length < 5) {
    for (const b of randomBytesPooled(8)) {
      if (b < 248 && out.length < 5) out += BASE62[b % 62];
    }
  }
  // Five letters the server serves itself: a bundle by that code could never be reached.
  return TAKEN_CODES.has(out) ? newShortCode() : out;
}

/** First path segments of five characters that name the server's own pages, not a bundle. */
const TAKEN_CODES = new Set(['admin']);

/** 256 random bits as 64 lowercase hex characters. */
export const newUploadToken = (): string => randomHex(32);

/** Secrets are stored only as SHA-256: they are high-entropy, so a fast hash is enough. */
export const hashSecret = (secret: string): Buffer => createHash('sha256').update(secret).digest();

/** Constant-time equality of a presented secret with a stored hash. */
export function secretMatches(secret: string, storedHash: Uint8Array): boolean {
  const h = hashSecret(secret);
  return h.length === storedHash.length && timingSafeEqual(h, storedHash);
}
