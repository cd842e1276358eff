import { createHmac, timingSafeEqual } from 'node:crypto';

const HOUR_S = 3600;

export interface Signer {
  /** Access token for one bundle, bound to the client IP, valid one hour. */
  accessToken(bundleId: number, ip: string, nowMs?: number): { token: string; expiresAt: number };
  verifyAccessToken(token: string, bundleId: number, ip: string, nowMs?: number): boolean;
  /** Query suffix `exp=…&sig=…` authorizing only the preview of one file for one hour. */
  previewQuery(fileId: number, nowMs?: number): string;
  verifyPreview(fileId: number, exp: string | null, sig: string | null, nowMs?: number): boolean;
  /** Signature of an unsubscribe link for one address (its key, see addressKey); it never expires. */
  unsubscribeSig(addressKey: string): string;
  verifyUnsubscribe(addressKey: string, sig: string | null): boolean;
  /**
   * The upload token of the bundle a tus upload creates (64 hex digits, like a random one): derived
   * from the upload's id, so its creator, who alone holds the upload's URL, can be told it again.
   */
  tusUploadToken(uploadId: string): string;
  /** The MAC of an operator console session cookie (its session id and secret part). */
  adminSession(id: number, secretPart: string): string;
  verifyAdminSession(id: number, secretPart: string, presented: string): boolean;
  /** The token every form of console session `id` carries. */
  adminCsrf(id: number): string;
  verifyAdminCsrf(id: number, presented: unknown): boolean;
}

/** HMAC-SHA256 tokens keyed by SECRET; each purpose has its own label so one can never stand for another. */
export function createSigner(secret: Buffer): Signer {
  const mac = (text: string): Buffer => createHmac('sha256', secret).update(text).digest();
  // Compared as canonical base64url text: decoding first would accept several spellings of one MAC
  // (the last character carries two padding bits).
  const same = (presented: string, expected: Buffer): boolean => {
    const a = Buffer.from(presented);
    const b = Buffer.from(expected.toString('base64url'));
    return a.length === b.length && timingSafeEqual(a, b);
  };
  const b64 = (b: Buffer): string => b.toString('base64url');
  return {
    tusUploadToken: (uploadId) => mac(`tus-upload-token|${uploadId}`).toString('hex'),
    accessToken(bundleId, ip, nowMs = Date.now()) {
      const exp = Math.floor(nowMs / 1000) + HOUR_S;
      // `<expiry>.<mac>`: the bundle and the IP are inside the MAC, not the token, so it reveals
      // neither (a bundle's internal id is sequential: it would tell how many bundles exist). The
      // verifier knows the bundle from the path it guards.
      return { token: `${exp}.${b64(mac(`access|${bundleId}|${exp}|${ip}`))}`, expiresAt: exp };
    },
    verifyAccessToken(token, bundleId, ip, nowMs = Date.now()) {
      const m = /^(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(token);
      if (!m || Number(m[1]) * 1000 <= nowMs) return false;
      return same(m[2]!, mac(`access|${bundleId}|${m[1]}|${ip}`));
    },
    previewQuery(fileId, nowMs = Date.now()) {
      const exp = Math.floor(nowMs / 1000) + HOUR_S;
      return `exp=${exp}&sig=${b64(mac(`preview|${fileId}|${exp}`))}`;
    },
    verifyPreview(fileId, exp, sig, nowMs = Date.now()) {
      if (exp === null || sig === null || !/^\d{1,12}$/.test(exp) || Number(exp) * 1000 <= nowMs) return false;
      if (!/^[A-Za-z0-9_-]{43}$/.test(sig)) return false;
      return same(sig, mac(`preview|${fileId}|${exp}`));
    },
    adminSession: (id, secretPart) => b64(mac(`admin-session|${id}|${secretPart}`)),
    verifyAdminSession: (id, secretPart, presented) => same(presented, mac(`admin-session|${id}|${secretPart}`)),
    adminCsrf: (id) => b64(mac(`admin-csrf|${id}`)),
    verifyAdminCsrf: (id, presented) => typeof presented === 'string' && same(presented, mac(`admin-csrf|${id}`)),
    unsubscribeSig: (addressKey) => b64(mac(`unsubscribe|${addressKey}`)),
    verifyUnsubscribe(addressKey, sig) {
      if (sig === null || !/^[A-Za-z0-9_-]{43}$/.test(sig)) return false;
      return same(sig, mac(`unsubscribe|${addressKey}`));
    },
  };
}
