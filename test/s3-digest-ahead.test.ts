/** The S3 store's CRC-32s of resumables taken as their bytes pass (src/storage/s3/digest-ahead.ts). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import type { BlobAppender } from '../src/storage/blob-store.ts';
import { createDigestsAhead } from '../src/storage/s3/digest-ahead.ts';

/** An append over an in-memory object: what finish() makes durable is what `object` holds after it. */
function memoryAppender(object: Buffer[], offset: number, limit = Infinity): BlobAppender {
  const taken: Buffer[] = [];
  let refused = false;
  const size = (): number => offset + taken.reduce((n, b) => n + b.length, 0);
  return {
    offset,
    write(chunk) {
      if (refused || size() + chunk.length > limit) refused = true;
      else taken.push(Buffer.from(chunk));
      return true;
    },
    onDrain: () => {},
    async finish(opts = {}) {
      const all = Buffer.concat(taken);
      const keep = Math.min(all.length, (opts.cutTo ?? Infinity) - offset);
      if (keep > 0) object.push(all.subarray(0, keep));
      return { offset: offset + Math.max(keep, 0), error: refused ? new Error('TOO_LARGE') : null };
    },
    abort: () => {},
  };
}

const digestOf = (b: Buffer) => ({ size: b.length, crc32: crc32(b) >>> 0, sha256: null });

test('a CRC follows appends that end where the next begins, and survives aborted, cut-back and refused ones', async () => {
  const digests = createDigestsAhead();
  const object: Buffer[] = [];
  const at = (): number => Buffer.concat(object).length;
  const append = async (data: Buffer, o: { cutTo?: number; abort?: boolean; limit?: number } = {}): Promise<void> => {
    const ap = digests.feed('u', memoryAppender(object, at(), o.limit));
    ap.write(data);
    if (o.abort) return ap.abort();
    await ap.finish({ cutTo: o.cutTo });
    ap.abort(); // after finish: changes nothing
    digests.confirm('u', at()); // the caller records the offset
  };
  await append(randomBytes(1000));
  await append(randomBytes(500), { abort: true });
  await append(randomBytes(500), { cutTo: at() });
  await append(randomBytes(700));
  await append(randomBytes(100), { limit: at() + 50 });
  const all = Buffer.concat(object);
  assert.equal(all.length, 1700);
  assert.deepEqual(digests.take('u', all.length), digestOf(all));
  assert.equal(digests.take('u', all.length), null, 'taken once');
});

test('no CRC for bytes this process did not see, nor one that covers bytes the object lacks or that are not on record', async () => {
  const digests = createDigestsAhead();
  /** Appends `n` random bytes to `object` at `at` through the digests, then, with `recorded`, confirms the end. */
  const appendHere = async (id: string, object: Buffer[], at: number, n: number, o: { cutTo?: number; recorded?: boolean } = {}): Promise<void> => {
    const ap = digests.feed(id, memoryAppender(object, at));
    ap.write(randomBytes(n));
    const r = await ap.finish({ cutTo: o.cutTo });
    if (o.recorded) digests.confirm(id, r.offset);
  };
  // The first bytes went through another node: nothing to continue from.
  await appendHere('v', [randomBytes(300)], 300, 200, { recorded: true });
  assert.equal(digests.take('v', 500), null);
  // A cut inside the append's bytes keeps some of them: the CRC no longer matches.
  await appendHere('w', [], 0, 400, { cutTo: 100, recorded: true });
  assert.equal(digests.take('w', 100), null);
  // Another node appended since: this CRC ends short of the offset on record.
  const seen: Buffer[] = [];
  await appendHere('x', seen, 0, 100, { recorded: true });
  seen.push(randomBytes(50));
  await appendHere('x', seen, 150, 10, { recorded: true });
  assert.equal(digests.take('x', 160), null);
  // Appended here but never recorded (the record failed): another node may write those offsets
  // again with other bytes, so the run is neither continued nor taken.
  const unrecorded: Buffer[] = [];
  await appendHere('z', unrecorded, 0, 100);
  assert.equal(digests.take('z', 100), null);
  await appendHere('z', unrecorded, 0, 100);
  unrecorded.splice(0, unrecorded.length, randomBytes(100)); // rewritten elsewhere
  await appendHere('z', unrecorded, 100, 10, { recorded: true });
  assert.equal(digests.take('z', 110), null);
  // Forgotten with its resumable.
  await appendHere('y', [], 0, 10, { recorded: true });
  digests.forget('y');
  assert.equal(digests.take('y', 10), null);
});
