import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_UPLOAD_OPTIONS, MiB, uploadOptionsFrom } from '../src/web/upload-options.ts';

const of = (q: string) => uploadOptionsFrom(new URLSearchParams(q));

test('the upload page query may lower the tus threshold and chunk size, never raise them', () => {
  assert.deepEqual(of(''), DEFAULT_UPLOAD_OPTIONS);
  assert.deepEqual(of(`tus_threshold=${MiB}&tus_chunk=${MiB}`), { tusThresholdBytes: MiB, tusChunkBytes: MiB });
  assert.equal(of('tus_threshold=0').tusThresholdBytes, 0, 'every non-empty file through tus');
  assert.deepEqual(of(`tus_threshold=${128 * MiB}&tus_chunk=${512 * MiB}`), DEFAULT_UPLOAD_OPTIONS, 'larger values are ignored');
  assert.equal(of('tus_chunk=1000').tusChunkBytes, DEFAULT_UPLOAD_OPTIONS.tusChunkBytes, 'tiny chunks are ignored');
  for (const bad of ['-1', '1e6', '0x10', ' 5', '99999999999999']) {
    assert.deepEqual(of(`tus_threshold=${encodeURIComponent(bad)}`), DEFAULT_UPLOAD_OPTIONS, bad);
  }
});
