import type { Ctx } from '../http/context.ts';
import { sendError } from '../http/reply.ts';
import { AppError, toAppError } from '../errors.ts';

/** tus 1.0.0 wire constants, header parsing and the replies' shape. */
export const TUS_VERSION = '1.0.0';
export const TUS_EXTENSIONS = 'creation,creation-with-upload,creation-defer-length,termination,expiration,checksum,concatenation';
export const CHECKSUM_ALGORITHMS = ['sha256', 'sha1', 'md5'] as const;
export const OFFSET_TYPE = 'application/offset+octet-stream';
/** Unfinished uploads are kept this long after creation. */
export const UPLOAD_TTL_MS = 24 * 3_600_000;
export const UPLOAD_ID_RE = /^[0-9a-f]{32}$/;

/**
 * Headers every answer on a tus path carries, errors and 405s included (routes.ts adds them to
 * each request's reply headers); browsers may read them cross-origin.
 */
export const TUS_HEADERS: ReadonlyArray<readonly [string, string]> = [
  ['Tus-Resumable', TUS_VERSION],
  [
    'Access-Control-Expose-Headers',
    'Location, Upload-Offset, Upload-Length, Upload-Expires, Upload-Metadata, Upload-Defer-Length, Upload-Concat, Tus-Resumable, ' +
      'Tus-Version, Tus-Extension, Tus-Max-Size, Tus-Checksum-Algorithm, Sluice-Short-Code, Sluice-Share-Url, Sluice-File-Id, Sluice-Upload-Token, Sluice-Vanity-Url',
  ],
];

/** Protocol answers (offsets, lengths) must never come from a cache. */
export const NO_STORE: ReadonlyArray<readonly [string, string]> = [['Cache-Control', 'no-store']];

/**
 * Ends the request with an error through the one error writer (closing the connection when the
 * body may still flow); an unexpected one goes to `onInternal` first.
 */
export function replyError(ctx: Ctx, err: unknown, onInternal: (err: unknown) => void, close = false): void {
  const e = toAppError(err);
  if (e.status >= 500) onInternal(e.cause ?? err);
  sendError(ctx, e, close);
}

/** Every request but OPTIONS must speak our version (412 otherwise, naming the versions we speak). */
export function checkResumable(headers: Readonly<Record<string, string>>): void {
  if (headers['tus-resumable'] !== TUS_VERSION) {
    throw new AppError('TUS_VERSION_UNSUPPORTED', `Tus-Resumable ${TUS_VERSION} required`, { headers: [['Tus-Version', TUS_VERSION]] });
  }
}

/** A non-negative integer header, or undefined when absent; 400 when malformed. */
export function intHeader(headers: Readonly<Record<string, string>>, name: string): number | undefined {
  const v = headers[name];
  if (v === undefined) return undefined;
  if (!/^\d{1,16}$/.test(v.trim())) throw new AppError('INVALID_HEADER', `Invalid ${name} header`);
  const n = Number(v.trim());
  if (!Number.isSafeInteger(n)) throw new AppError('INVALID_HEADER', `Invalid ${name} header`);
  return n;
}

/**
 * Upload-Metadata: comma-separated `key base64value` pairs (value optional); keys unique. The header,
 * when sent, holds one pair or more: an empty one is malformed.
 */
export function parseMetadata(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (raw === undefined) return out;
  if (raw.trim() === '') throw new AppError('INVALID_METADATA', 'Upload-Metadata is empty: send key and value pairs, or leave the header out');
  if (raw.length > 8192) throw new AppError('INVALID_METADATA', 'Upload-Metadata too long');
  for (const pair of raw.split(',')) {
    const [key, value, extra] = pair.trim().split(' ');
    if (!key || extra !== undefined || !/^[\x21-\x2b\x2d-\x7e]+$/.test(key) || Object.hasOwn(out, key)) {
      throw new AppError('INVALID_METADATA', 'Malformed Upload-Metadata');
    }
    // Standard Base64, padded (RFC 4648 §4), as tus clients send it: anything else is not a value.
    if (value !== undefined && (value.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(value))) {
      throw new AppError('INVALID_METADATA', `Upload-Metadata ${key} is not base64`);
    }
    out[key] = value === undefined ? '' : Buffer.from(value, 'base64').toString('utf8');
  }
  return out;
}

/**
 * Metadata keys that are never echoed: the secrets (a new bundle's password and the upload token of
 * the bundle to append to) and the write-only notify_email. They are read at creation (the password
 * hashed, the token matched against its hash, the address kept with the new bundle's settings), so
 * neither the tus_uploads row's metadata nor HEAD's Upload-Metadata echo carries them.
 */
const UNECHOED_METADATA = new Set(['access_password', 'upload_token', 'notify_email', 'request_token']);

/**
 * The Upload-Metadata value to keep and echo: the client's pairs, in order, minus UNECHOED_METADATA
 * (the header was already validated by parseMetadata).
 */
export function storableMetadata(raw: string | undefined): string {
  if (raw === undefined) return '';
  return raw
    .split(',')
    .map((pair) => pair.trim())
    .filter((pair) => pair !== '' && !UNECHOED_METADATA.has(pair.split(' ')[0]!))
    .join(',');
}

export interface Checksum {
  readonly algorithm: (typeof CHECKSUM_ALGORITHMS)[number];
  readonly digest: Buffer;
}

/** Upload-Checksum: `<algorithm> <base64 digest>` of this request's body. */
export function parseChecksum(raw: string | undefined): Checksum | null {
  if (raw === undefined) return null;
  const m = /^([a-z0-9-]+) ([A-Za-z0-9+/]+={0,2})$/.exec(raw.trim());
  if (!m) throw new AppError('INVALID_CHECKSUM', 'Malformed Upload-Checksum');
  const algorithm = CHECKSUM_ALGORITHMS.find((a) => a === m[1]);
  if (!algorithm) throw new AppError('CHECKSUM_ALGORITHM_UNSUPPORTED', `Unsupported checksum algorithm ${m[1]}`);
  return { algorithm, digest: Buffer.from(m[2]!, 'base64') };
}

/** RFC 9110 IMF-fixdate, as Upload-Expires wants. */
export const httpDate = (d: Date): string => d.toUTCString();
