/**
 * The CRC-32 every stored file and zip entry carries: the native implementation is the one in use
 * on x86-64 Linux, and it gives zlib's values, whole or continued piece by piece.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { crc32 as zlibCrc32 } from 'node:zlib';
import { crc32 } from '../src/util/crc32.mjs';

test('the native CRC-32 is loaded where a prebuilt binary exists, and agrees with zlib', () => {
  if (process.platform === 'linux' && process.arch === 'x64') {
    assert.notEqual(crc32, zlibCrc32, '@node-rs/crc32 did not load: is it installed (npm ci)?');
  }
  const bytes = randomBytes((1 << 20) + 13);
  assert.equal(crc32(bytes), zlibCrc32(bytes));
  let c = 0;
  for (let at = 0; at < bytes.length; at += 65_537) c = crc32(bytes.subarray(at, at + 65_537), c);
  assert.equal(c, zlibCrc32(bytes), 'continued over pieces');
  assert.equal(crc32(new Uint8Array(0)), 0);
  assert.equal(crc32(bytes.subarray(5, 5)), 0);
});
