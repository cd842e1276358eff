// A PATCH that does not complete its upload puts its new offset on record while its bytes are still
// being synced (src/tus/unsynced.ts). These tests leave the row as a crash between that commit and the
// sync would (a range on record, marked, with whatever bytes landed) and check what the next request
// makes of it; and that the store remembers only what it synced itself, until a restart.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { tusCall, tusCreate, tusPatch } from './helpers/tus.ts';
import { MiB, sha } from './upload-util.ts';
import { waitFor } from './helpers/wait.ts';

interface Marked { upload_offset: number; unsynced_from: number | null; unsynced_crc: number | null }

for (const backend of backends()) {
  describe(`tus: an offset on record before its bytes are synced (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(() => srv?.close());

    const idOf = (loc: string): string => loc.split('/').pop()!;
    const rowOf = async (loc: string): Promise<Marked> =>
      (await srv.sql<Marked[]>`select upload_offset::float8, unsynced_from::float8, unsynced_crc::float8 from tus_uploads where id = ${idOf(loc)}`)[0]!;
    const headOffset = async (loc: string): Promise<number> => Number((await tusCall(srv, 'HEAD', loc)).headers['upload-offset']);
    /** A finished upload's bytes, from its URL. */
    async function stored(loc: string): Promise<Buffer> {
      const r = await request(`${srv.url}${loc}`, { headers: { 'tus-resumable': '1.0.0' } });
      assert.equal(r.statusCode, 200);
      return Buffer.from(await r.body.arrayBuffer());
    }
    /** What a crash after the offset's commit and before the sync leaves: [from, to) on record and marked with `crc`, the part holding `landed` from `from` on. */
    async function markRange(loc: string, from: number, to: number, crc: number, landed: Buffer | null): Promise<void> {
      if (landed) {
        const fd = fs.openSync(path.join(srv.dataDir, 'tus', `${idOf(loc)}.part`), 'r+');
        fs.writeSync(fd, landed, 0, landed.length, from);
        fs.closeSync(fd);
      }
      await srv.sql`update tus_uploads set upload_offset = ${to}, unsynced_from = ${from}, unsynced_crc = ${crc} where id = ${idOf(loc)}`;
    }
    /** Sends data[at..] in one PATCH; expects the upload complete with exactly `data`. */
    async function finish(loc: string, data: Buffer, at: number): Promise<void> {
      const r = await tusPatch(srv, loc, at, data.subarray(at));
      assert.equal(r.status, 204, r.body);
      assert.equal(r.headers['upload-offset'], String(data.length));
      assert.equal(sha(await stored(loc)), sha(data));
    }

    if (backend === 's3') {
      test('on S3 an acknowledged append is stored already: no mark', async () => {
        const data = randomBytes(12 * MiB);
        const loc = await tusCreate(srv, data.length);
        const r = await tusPatch(srv, loc, 0, data.subarray(0, 8 * MiB));
        assert.equal(r.status, 204, r.body);
        assert.deepEqual(await rowOf(loc), { upload_offset: 8 * MiB, unsynced_from: null, unsynced_crc: null });
        await finish(loc, data, 8 * MiB);
      });
      return;
    }

    test('a PATCH short of the end: its mark goes once synced; the range is known here until a restart, then read back', async () => {
      const data = randomBytes(12 * MiB);
      const loc = await tusCreate(srv, data.length);
      const r = await tusPatch(srv, loc, 0, data.subarray(0, 8 * MiB));
      assert.equal(r.status, 204, r.body);
      assert.equal(r.headers['upload-offset'], String(8 * MiB));
      await waitFor('the mark cleared', async () => (await rowOf(loc)).unsynced_from === null);
      // Marked again as a crash would leave it: this process synced that very range, so it counts.
      await markRange(loc, 0, 8 * MiB, crc32(data.subarray(0, 8 * MiB)), null);
      assert.equal(await headOffset(loc), 8 * MiB);
      // A restarted server cannot know it: HEAD reports only what is known durable...
      await srv.stop();
      await srv.restart();
      assert.equal(await headOffset(loc), 0);
      // ...and a PATCH from the end of the range has it read back, found whole, and kept.
      await finish(loc, data, 8 * MiB);
      assert.equal((await rowOf(loc)).unsynced_from, null);
    });

    for (const [what, landed] of [
      ['half of it', (good: Buffer) => good.subarray(0, good.length / 2)],
      ['other bytes', (good: Buffer) => Buffer.from(good.map((b) => b ^ 0xff))],
      ['nothing', () => null],
    ] as const) {
      test(`a marked range of which ${what} landed is dropped: the client resumes from its start`, async () => {
        const data = randomBytes(3 * MiB);
        const loc = await tusCreate(srv, data.length);
        assert.equal((await tusPatch(srv, loc, 0, data.subarray(0, MiB))).status, 204);
        const good = data.subarray(MiB, 2 * MiB);
        await markRange(loc, MiB, 2 * MiB, crc32(good), landed(good));
        assert.equal(await headOffset(loc), MiB, 'HEAD reports only what is known durable');
        // A client that was told 2 MiB before the crash resumes there: the range is checked, found wanting, dropped.
        const r = await tusPatch(srv, loc, 2 * MiB, data.subarray(2 * MiB));
        assert.equal(r.status, 409, r.body);
        assert.deepEqual(await rowOf(loc), { upload_offset: MiB, unsynced_from: null, unsynced_crc: null });
        assert.equal(await headOffset(loc), MiB);
        await finish(loc, data, MiB);
      });
    }

    test('a client resuming from the start of a marked range has it dropped unread', async () => {
      const data = randomBytes(3 * MiB);
      const loc = await tusCreate(srv, data.length);
      assert.equal((await tusPatch(srv, loc, 0, data.subarray(0, MiB))).status, 204);
      // Bytes that would not match: they are never read, since the client sends them again.
      await markRange(loc, MiB, 2 * MiB, crc32(data.subarray(MiB, 2 * MiB)), randomBytes(MiB));
      await finish(loc, data, MiB);
    });
  });
}
