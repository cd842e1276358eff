import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { coalesced, createDisk, newFileKey, type Disk } from '../src/storage/disk.ts';
import { createHasher, type Hasher } from '../src/storage/hasher.ts';

describe('storage keys', () => {
  test('file keys are unique 32-hex keys that share a shard for runs, then move on', () => {
    const keys = Array.from({ length: 2048 }, () => newFileKey());
    for (const k of keys) assert.match(k, /^[0-9a-f]{32}$/);
    assert.equal(new Set(keys).size, keys.length);
    const shards = new Set(keys.map((k) => k.slice(0, 4)));
    // 2048 keys in runs of 256: at most 9 runs (the first may be partial), far fewer than random keys' ~2000 shards.
    assert.ok(shards.size >= 2 && shards.size <= 9, `shards: ${shards.size}`);
  });
});

describe('coalesced task', () => {
  test('callers arriving while a run is in flight share one next run; each caller sees a run that started after it', async () => {
    const started: number[] = [];
    let release: (() => void) | undefined;
    const run = coalesced(async () => {
      started.push(Date.now());
      await new Promise<void>((resolve) => (release = resolve));
    });
    const first = [run('d'), run('d')]; // same tick: one run
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 1);
    const second = [run('d'), run('d'), run('d')]; // while it runs: one queued run for all three
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 1);
    release!();
    await Promise.all(first);
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 2);
    release!();
    await Promise.all(second);
    const other = run('e');
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 3, 'another key runs on its own');
    release!();
    await other;
  });

  test('a failed run rejects every caller that shared it, and the next call runs again', async () => {
    let calls = 0;
    const run = coalesced(async () => {
      calls++;
      if (calls === 1) throw new Error('EIO');
    });
    const results = await Promise.allSettled([run('d'), run('d')]);
    assert.deepEqual(results.map((r) => r.status), ['rejected', 'rejected']);
    await run('d');
    assert.equal(calls, 2);
  });
});

describe('disk commit', () => {
  let dir: string;
  let hasher: Hasher;
  let disk: Disk;
  before(async () => {
    dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'sluice-disk-'));
    hasher = createHasher(1);
    disk = await createDisk(dir, hasher);
  });
  after(async () => {
    await hasher.close();
    await fsp.rm(dir, { recursive: true, force: true });
  });

  test('concurrent commits into new and shared shard directories all land', async () => {
    const keys = [...Array.from({ length: 40 }, () => newFileKey()), 'ffff' + '0'.repeat(28), 'ffee' + '1'.repeat(28)];
    await Promise.all(
      keys.map(async (key, i) => {
        const part = path.join(disk.tmpDir, `${process.pid}-test${i}.part`);
        await fsp.writeFile(part, `file ${i}`);
        await disk.commit(part, key);
      }),
    );
    for (const [i, key] of keys.entries()) assert.equal(await fsp.readFile(disk.filePath(key), 'utf8'), `file ${i}`);
    assert.deepEqual(await fsp.readdir(disk.tmpDir), []);
  });

  test('a shard directory removed by hand after its first use is made again by the next commit', async () => {
    const key = (n: number): string => 'abcd' + String(n).repeat(28);
    const commit = async (n: number): Promise<void> => {
      const part = path.join(disk.tmpDir, `${process.pid}-gone${n}.part`);
      await fsp.writeFile(part, `file ${n}`);
      await disk.commit(part, key(n));
    };
    await commit(1);
    await fsp.rm(path.join(disk.filesDir, 'ab'), { recursive: true });
    await commit(2);
    assert.equal(await fsp.readFile(disk.filePath(key(2)), 'utf8'), 'file 2');
    // Several commits into the gone directory at once: each one retries, not only the first to notice.
    await fsp.rm(path.join(disk.filesDir, 'ab'), { recursive: true });
    await Promise.all([4, 5, 6, 7].map(commit));
    for (const n of [4, 5, 6, 7]) assert.equal(await fsp.readFile(disk.filePath(key(n)), 'utf8'), `file ${n}`);
    // A missing part is still an error, not a retry loop.
    await assert.rejects(disk.commit(path.join(disk.tmpDir, `${process.pid}-missing.part`), key(3)), { code: 'ENOENT' });
  });
});
