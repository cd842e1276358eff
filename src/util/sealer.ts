import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';

/** AES-256-GCM under a key derived (HKDF-SHA256) from the server SECRET for one purpose. */
export interface Sealer {
  /** iv (12) | tag (16) | ciphertext; `context` is authenticated, so a sealed value only opens where it was made. */
  seal(plaintext: string, context: string): Buffer;
  /** Throws when the value was tampered with or sealed for another context or secret. */
  open(sealed: Uint8Array, context: string): string;
}

export function createSealer(secret: Buffer, purpose: string): Sealer {
  const key = Buffer.from(hkdfSync('sha256', secret, 'sluice-sealer-v1', purpose, 32));
  return {
    seal(plaintext, context) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(Buffer.from(context, 'utf8'));
      const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return Buffer.concat([iv, cipher.getAuthTag(), ct]);
    },
    open(sealed, context) {
      const buf = Buffer.from(sealed);
      if (buf.length < 28) throw new Error('sealed value too short');
      const decipher = createDecipheriv('aes-256-gcm', key, buf.subarray(0, 12));
      decipher.setAAD(Buffer.from(context, 'utf8'));
      decipher.setAuthTag(buf.subarray(12, 28));
      return Buffer.concat([decipher.update(buf.subarray(28)), decipher.final()]).toString('utf8');
    },
  };
}
