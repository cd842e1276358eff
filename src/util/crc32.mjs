// CRC-32 (the zip polynomial) of every stored byte: each upload's checksum, each zip entry's. The
// native @node-rs/crc32 computes it with the CPU's carry-less multiply, several times zlib's speed;
// where its prebuilt binary does not load (a platform it has none for), zlib's is the same function.
// Plain JS, so the hash worker (hash-worker.mjs) loads this very module.
import { createRequire } from 'node:module';
import { crc32 as zlibCrc32 } from 'node:zlib';

function loadNative() {
  try {
    return createRequire(import.meta.url)('@node-rs/crc32').crc32;
  } catch {
    return null;
  }
}

const native = loadNative();

/** crc32(bytes, previous = 0): the CRC-32 of `bytes`, continuing from `previous`. */
export const crc32 = native ?? zlibCrc32;

/** Whether crc32 is the native one (zlib's can be several times slower: worth avoiding on the event loop). */
export const crc32IsNative = native !== null;
