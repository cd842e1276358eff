import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import type { Passwords } from './caller.ts';

/** scrypt N=2^15, r=8, p=1 (~32 MiB, tens of ms): slow for guessing, run on libuv's thread pool. */
const LOG_N = 15;
const R = 8;
const P = 1;
const KEY_LEN = 32;

function derive(password: string, salt: Buffer, logN: number, r: number, p: number): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFC'), salt, KEY_LEN, { N: 2 ** logN, r, p, maxmem: 256 * 2 ** logN * r }, (err, key) =>
      err ? reject(err) : resolve(key),
    ),
  );
}

export function createPasswords(): Passwords {
  return {
    async hash(password) {
      const salt = randomBytes(16);
      const key = await derive(password, salt, LOG_N, R, P);
      return `scrypt$${LOG_N}$${R}$${P}$${salt.toString('base64')}$${key.toString('base64')}`;
    },
    async verify(password, stored) {
      const [alg, logN, r, p, salt, key] = stored.split('$');
      if (alg !== 'scrypt' || !salt || !key) return false;
      const expected = Buffer.from(key, 'base64');
      const actual = await derive(password, Buffer.from(salt, 'base64'), Number(logN), Number(r), Number(p));
      return actual.length === expected.length && timingSafeEqual(actual, expected);
    },
  };
}
