import { describe, it, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { backends, startServer, storedBlobs, type TestServer } from './helpers/server.ts';
import { MiB, sha, created, download, assertError, ensureRunning, assertServes, assertNoServerErrors, snapshot, assertNothingKept, assertDiskMatchesRows, survives, rawConnect, rawHead, partHead, closing, newBoundary, write, assertJsonError } from './upload-util.ts';
import { file, upload, call, type Res } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

const CAP = 8 * MiB;

for (const backend of backends()) {
  describe(`append to a bundle (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { ANON_MAX_BUNDLE_BYTES: String(CAP) });
    });
    after(async () => {
      await srv?.close();
    });
    beforeEach(() => ensureRunning(srv));
    afterEach(() => assertNoServerErrors(srv));

    it('200 with the added files; the bundle lists all of them', async () => {
      const first = await created(srv, [file('first.txt', 'one')]);
      const added = [file('second.bin', randomBytes(300_000)), file('dritte €.txt', 'three', 'text/plain')];
      const r = await upload(srv, added, { path: `/api/v1/upload/${first.upload_token}` });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(r.json.success, true);
      assert.equal(r.json.short_code, first.short_code);
      assert.equal(r.json.share_url, `/${first.short_code}`);
      assert.equal(r.json.upload_url, `/u/${first.upload_token}`);
      assert.equal(r.json.files.length, 2);
      for (const [i, f] of r.json.files.entries()) {
        assert.equal(f.name, added[i]!.name);
        assert.equal(f.size, added[i]!.data!.length);
        assert.ok(Number.isSafeInteger(f.id) && f.id > 0 && f.id !== first.files[0]!.id);
        assert.equal(f.download_url, `/api/v1/download/${f.id}`);
        assert.equal(sha((await download(srv, f)).data), sha(added[i]!.data!));
      }
      const info = await call(srv, 'GET', `/api/v1/bundle/${first.short_code}`, { json: true });
      assert.equal(info.status, 200);
      assert.equal(info.json.file_count, 3);
      assert.equal(info.json.total_size_bytes, 3 + 300_000 + 5);
      assert.deepEqual(info.json.files, [...first.files, ...r.json.files]);
      await assertDiskMatchesRows(srv);
    });

    it('400 when the append carries no files, with nothing kept', async () => {
      const b = await created(srv, [file('a.txt', 'a')]);
      const before = await snapshot(srv);
      assertError(await upload(srv, [], { fields: { description: 'x' }, path: `/api/v1/upload/${b.upload_token}` }), 400);
      await assertNothingKept(srv, before);
    });

    it('403 for a malformed or unknown token, with nothing kept', async () => {
      const b = await created(srv, [file('a.txt', 'a')]);
      const before = await snapshot(srv);
      const bad = ['abc', 'g'.repeat(64), b.upload_token.slice(0, 63), `${b.upload_token}0`, randomBytes(32).toString('hex')];
      for (const token of bad) {
        assertError(await upload(srv, [file('x.txt', 'x')], { path: `/api/v1/upload/${token}` }), 403);
      }
      await assertNothingKept(srv, before);
      const info = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}`, { json: true });
      assert.equal(info.json.file_count, 1);
    });

    it('403 once the bundle has expired', async () => {
      const b = await created(srv, [file('a.txt', 'a')]);
      const cli = await srv.cli(['bundles', 'expire', b.short_code]);
      assert.equal(cli.code, 0, cli.stderr);
      const before = await snapshot(srv);
      assertError(await upload(srv, [file('late.txt', randomBytes(100_000))], { path: `/api/v1/upload/${b.upload_token}` }), 403, /expired/i);
      await assertNothingKept(srv, before);
      const [row] = await srv.sql<{ file_count: number }[]>`select file_count from bundles where short_code = ${b.short_code}`;
      assert.equal(row?.file_count, 1);
    });

    it('an append past the cap is 400 and leaves the bundle as it was', async () => {
      const b = await created(srv, [file('base.bin', randomBytes(CAP - MiB))]);
      const before = await snapshot(srv);
      const over = [file('a.bin', randomBytes(MiB / 2)), file('b.bin', randomBytes(MiB / 2 + 1))];
      assertError(await survives(srv, upload(srv, over, { path: `/api/v1/upload/${b.upload_token}` })), 400, /size|limit|large/i);
      await assertNothingKept(srv, before);
      // The failed append's reservation is released: exactly the remaining room still fits.
      const fits = await survives(srv, upload(srv, [file('last.bin', randomBytes(MiB))], { path: `/api/v1/upload/${b.upload_token}` }));
      assert.equal(fits.status, 200, JSON.stringify(fits.json));
      const status = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, CAP);
      assert.equal(status.json.space_remaining, 0);
    });

    it('an append still streaming is refused as soon as another one committed into its room', async () => {
      const b = await created(srv, [file('base.bin', randomBytes(2 * MiB))]); // 6 MiB of room
      const boundary = newBoundary();
      const total = 5 * MiB;
      const conn = await rawConnect(srv.port);
      await write(conn.sock, rawHead(`/api/v1/upload/${b.upload_token}`, boundary, partHead(boundary, 'slow.bin').length + total + closing(boundary).length));
      await write(conn.sock, partHead(boundary, 'slow.bin'));
      await write(conn.sock, randomBytes(2 * MiB)); // the slow one holds 2 MiB of the room
      const fast = await survives(srv, upload(srv, [file('fast.bin', randomBytes(3 * MiB))], { path: `/api/v1/upload/${b.upload_token}` }));
      assert.equal(fast.status, 200, JSON.stringify(fast.json)); // 2 + 3 of 6 MiB
      // 2 + 3 + 3 MiB would cross the cap: all but the last byte of the body goes, and the answer
      // must come without it (refused before the body ended, whatever the timing).
      // (Not awaited: once it refuses, the server reads no more, and the write may never drain.)
      conn.sock.write(randomBytes(total - 2 * MiB - 1));
      assertJsonError(await conn.response, 400, /size|limit/i);
      conn.sock.destroy();
      const status = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, 5 * MiB);
      await waitFor('no temp parts left', async () => (await storedBlobs(srv)).parts.length === 0);
      await assertDiskMatchesRows(srv);
    });

    it('the length a tus upload declared stays reserved against multipart appends', async () => {
      const b = await created(srv, [file('base.bin', randomBytes(2 * MiB))]); // 6 MiB of room
      const meta = `filename ${Buffer.from('t.bin').toString('base64')},upload_token ${Buffer.from(b.upload_token).toString('base64')}`;
      const tus = await fetch(`${srv.url}/api/v1/tus/`, {
        method: 'POST',
        headers: { 'tus-resumable': '1.0.0', 'upload-length': String(5 * MiB), 'upload-metadata': meta },
      });
      assert.equal(tus.status, 201, await tus.text());
      assertError(await survives(srv, upload(srv, [file('m.bin', randomBytes(2 * MiB))], { path: `/api/v1/upload/${b.upload_token}` })), 400, /size|limit/i);
      const fits = await survives(srv, upload(srv, [file('m.bin', randomBytes(MiB))], { path: `/api/v1/upload/${b.upload_token}` }));
      assert.equal(fits.status, 200, JSON.stringify(fits.json));
      const loc = new URL(tus.headers.get('location')!).pathname;
      const done = await fetch(`${srv.url}${loc}`, {
        method: 'PATCH',
        headers: { 'tus-resumable': '1.0.0', 'content-type': 'application/offset+octet-stream', 'upload-offset': '0' },
        body: randomBytes(5 * MiB),
      });
      assert.equal(done.status, 204, await done.text());
      const status = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, CAP);
    });

    it('a tus append of deferred length is bounded by the room left now, and refused once the bundle expired', async () => {
      const b = await created(srv, [file('base.bin', randomBytes(2 * MiB))]); // 6 MiB of room
      const meta = `filename ${Buffer.from('t.bin').toString('base64')},upload_token ${Buffer.from(b.upload_token).toString('base64')}`;
      const open = async (): Promise<string> => {
        const r = await fetch(`${srv.url}/api/v1/tus/`, { method: 'POST', headers: { 'tus-resumable': '1.0.0', 'upload-defer-length': '1', 'upload-metadata': meta } });
        assert.equal(r.status, 201, await r.text());
        return new URL(r.headers.get('location')!).pathname;
      };
      const patch = (loc: string, body: Buffer, extra: Record<string, string> = {}): Promise<Response> =>
        fetch(`${srv.url}${loc}`, {
          method: 'PATCH',
          headers: { 'tus-resumable': '1.0.0', 'content-type': 'application/offset+octet-stream', 'upload-offset': '0', ...extra },
          body: new Uint8Array(body),
        });
      const [a, c] = [await open(), await open()];
      const doneA = await patch(a, randomBytes(4 * MiB), { 'upload-length': String(4 * MiB) });
      assert.equal(doneA.status, 204, await doneA.text());
      const over = await patch(c, randomBytes(3 * MiB));
      assert.equal(over.status, 413, await over.text());
      const fits = await patch(c, randomBytes(2 * MiB));
      assert.equal(fits.status, 204, await fits.text());
      const late = await open();
      await srv.sql`update bundles set expires_at = now() - interval '1 second' where short_code = ${b.short_code}`;
      const expired = await patch(late, randomBytes(10));
      assert.equal(expired.status, 403, await expired.text());
    });

    it('file parts that are not kept still count against the cap', async () => {
      const before = await snapshot(srv);
      const junk = { name: 'junk', filename: 'junk.bin', data: randomBytes(CAP + MiB) };
      assertError(await survives(srv, upload(srv, [file('a.txt', 'a')], { parts: [junk] })), 400, /size|limit/i);
      const empty = { name: 'files[]', filename: '', data: randomBytes(CAP + MiB) };
      assertError(await survives(srv, upload(srv, [file('a.txt', 'a')], { parts: [empty] })), 400, /size|limit/i);
      await assertNothingKept(srv, before);
    });

    it('concurrent appends racing the cap never overshoot it', async () => {
      const base = 5 * MiB;
      const b = await created(srv, [file('base.bin', randomBytes(base))]);
      const racers = 6;
      const results: Res[] = await Promise.all(
        Array.from({ length: racers }, (_, i) =>
          survives(srv, upload(srv, [file(`race${i}.bin`, randomBytes(MiB))], { path: `/api/v1/upload/${b.upload_token}` })),
        ),
      );
      const ok = results.filter((r) => r.status === 200);
      for (const r of results) {
        if (r.status !== 200) assertError(r, 400, /size|limit|large/i);
        else assert.equal(r.json.files.length, 1);
      }
      assert.ok(ok.length >= 1, 'at least one append fits');
      assert.ok(ok.length <= (CAP - base) / MiB, `${ok.length} appends of 1 MiB were accepted into ${(CAP - base) / MiB} MiB of room`);

      const status = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, base + ok.length * MiB);
      assert.ok((status.json.total_size_bytes as number) <= CAP);
      const rows = await srv.sql<{ id: number; size: number }[]>`
        select f.id::float8 as id, f.size::int as size from files f join bundles b on b.id = f.bundle_id where b.short_code = ${b.short_code} order by f.id`;
      assert.deepEqual(rows.map((r) => r.id), [b.files[0]!.id, ...ok.map((r) => r.json.files[0]!.id)].sort((x, y) => x - y));
      assert.equal(rows.reduce((n, r) => n + r.size, 0), base + ok.length * MiB);
      const info = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}`, { json: true });
      assert.equal(info.json.file_count, 1 + ok.length);
      // Losers' temp parts and any renamed files are gone; winners' files are exactly the rows.
      await waitFor('no temp parts left', async () => (await storedBlobs(srv)).parts.length === 0);
      await assertDiskMatchesRows(srv);
      await assertServes(srv);
    });
  });
}
