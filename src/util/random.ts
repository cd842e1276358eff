import { randomBytes } from 'node:crypto';

/**
 * CSPRNG bytes drawn from a pooled block. Each `crypto.randomBytes` call pays the OpenSSL DRBG's
 * locking and checks (bench/RESULTS.md, "Design notes moved from the code"), and a small upload draws five or six ids and
 * tokens; one 4 KiB draw serves hundreds of them. The bytes are the same CSPRNG output, each handed out once.
 * A refill allocates a new block, so a slice already handed out never changes under its holder.
 */
const BLOCK = 4096;
let block = Buffer.alloc(0);
let used = 0;

export function randomBytesPooled(n: number): Buffer {
  if (n > BLOCK / 8) return randomBytes(n);
  if (used + n > block.length) {
    block = randomBytes(BLOCK);
    used = 0;
  }
  const out = block.subarray(used, used + n);
  used += n;
  return out;
}

/** `n` random bytes as 2n lowercase hex characters. */
export const randomHex = (n: number): string => randomBytesPooled(n).toString('hex');
