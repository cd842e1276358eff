// Concurrent tus creations into one bundle: exactly the uploads that fit are admitted, on both
// backends (PostgreSQL runs them on several connections at once), and /status counts reservations.
// And the completion racing its client: a HEAD never reports an upload whole before it is a file.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { OCTETS, tusCall, tusCreate, tusMeta, tusPatch, uploadPath, type TusRes } from './helpers/tus.ts';
import { MiB, assertNoServerErrors, logCheckpoint, markLog, rawConnect, sha, write } from './upload-util.ts';
import { waitFor } from './helpers/wait.ts';
import { file, upload, call } from './helpers/http.ts';

const CAP = 10 * MiB;

for (const backend of backends()) {
  describe(`tus reservations under concurrency (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { ANON_MAX_BUNDLE_BYTES: String(CAP) });
    });
    after(() => srv?.close());

    for (let round = 1; round <= 3; round++) {
      test(`round ${round}: 16 creations of 1 MiB against 9 MiB of room admit exactly 9; all 9 then finish`, async () => {
        const first = await tusCall(srv, 'POST', '/api/v1/tus/', { ...OCTETS, 'upload-length': '1000', 'upload-metadata': tusMeta({ filename: 'a' }) }, randomBytes(1000));
        assert.equal(first.status, 201, first.body);
        const token = first.headers['sluice-upload-token']!;
        const code = first.headers['sluice-short-code']!;
        // Read once first, so the answer after the creations comes from a cached bundle: reservations
        // must reach it too.
        assert.equal((await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true })).json.space_remaining, CAP - 1000);
        const replies = await Promise.all(
          Array.from({ length: 16 }, (_, i) =>
            tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': String(MiB), 'upload-metadata': tusMeta({ filename: `p${i}`, upload_token: token }) })),
        );
        const admitted = replies.filter((r) => r.status === 201);
        assert.deepEqual(replies.map((r) => r.status).sort(), [...Array(9).fill(201), ...Array(7).fill(413)], replies.map((r) => r.body).join());
        const status = await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true });
        assert.equal(status.json.space_remaining, CAP - 1000 - 9 * MiB, 'reservations are not free room');
        const done = await Promise.all(admitted.map((r) => tusPatch(srv, uploadPath(r.headers.location!), 0, randomBytes(MiB))));
        assert.deepEqual(done.map((r) => r.status), Array(9).fill(204), done.map((r) => r.body).join());
        // The bundle is not wedged: what is left is still free room.
        const small = await upload(srv, [file('s.txt', 'hello')], { path: `/api/v1/upload/${token}` });
        assert.equal(small.status, 200, JSON.stringify(small.json));
        const after = await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true });
        assert.equal(after.json.space_remaining, CAP - 1000 - 9 * MiB - 5);
        assertNoServerErrors(srv);
      });
    }

    test('deferred-length appends racing for the room: exactly the ones that fit complete; nothing is wedged', async () => {
      const first = await tusCall(srv, 'POST', '/api/v1/tus/', { ...OCTETS, 'upload-length': '1000', 'upload-metadata': tusMeta({ filename: 'a' }) }, randomBytes(1000));
      assert.equal(first.status, 201, first.body);
      const token = first.headers['sluice-upload-token']!;
      const code = first.headers['sluice-short-code']!;
      const room = CAP - 1000;
      const piece = 6 * MiB; // two do not fit together
      const locs: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-defer-length': '1', 'upload-metadata': tusMeta({ filename: `d${i}`, upload_token: token }) });
        assert.equal(r.status, 201, r.body);
        locs.push(uploadPath(r.headers.location!));
      }
      // Each sends its whole file in one PATCH that declares its length.
      const replies = await Promise.all(locs.map((loc) => tusPatch(srv, loc, 0, randomBytes(piece), { 'upload-length': String(piece) })));
      const statuses = replies.map((r) => r.status).sort();
      assert.deepEqual(statuses, [204, 413, 413], replies.map((r) => r.body).join());
      const status = await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, 1000 + piece);
      assert.equal(status.json.space_remaining, room - piece, 'the losers hold no room');
      // A loser resumes with what still fits, and a later small append fits beside it.
      const loser = locs[replies.findIndex((r) => r.status === 413)]!;
      const head = await tusCall(srv, 'HEAD', loser);
      assert.equal(head.headers['upload-offset'], '0', 'nothing of a refused PATCH was kept');
      const rest = room - piece - 3;
      assert.equal((await tusPatch(srv, loser, 0, randomBytes(rest), { 'upload-length': String(rest) })).status, 204);
      const small = await upload(srv, [file('s.txt', 'abc')], { path: `/api/v1/upload/${token}` });
      assert.equal(small.status, 200, JSON.stringify(small.json));
      assert.equal((await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true })).json.space_remaining, 0);
      assertNoServerErrors(srv);
    });

    test('deferred-length PATCHes that do not declare the length: one fits, the other is refused at once, and the winner completes', async () => {
      const first = await tusCall(srv, 'POST', '/api/v1/tus/', { ...OCTETS, 'upload-length': '1000', 'upload-metadata': tusMeta({ filename: 'a' }) }, randomBytes(1000));
      const token = first.headers['sluice-upload-token']!;
      const code = first.headers['sluice-short-code']!;
      const piece = 6 * MiB;
      const locs: string[] = [];
      for (let i = 0; i < 2; i++) {
        const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-defer-length': '1', 'upload-metadata': tusMeta({ filename: `n${i}`, upload_token: token }) });
        locs.push(uploadPath(r.headers.location!));
      }
      const replies = await Promise.all(locs.map((loc) => tusPatch(srv, loc, 0, randomBytes(piece))));
      assert.deepEqual(replies.map((r) => r.status).sort(), [204, 413], replies.map((r) => r.body).join());
      const winner = locs[replies.findIndex((r) => r.status === 204)]!;
      // Still open (its length is not known): it holds what it received, and no more.
      assert.equal((await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true })).json.space_remaining, CAP - 1000 - piece);
      assert.equal((await tusPatch(srv, winner, piece, Buffer.alloc(0), { 'upload-length': String(piece) })).status, 204, 'declaring the length completes it');
      const status = await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, 1000 + piece);
      assert.equal(status.json.space_remaining, CAP - 1000 - piece);
      const small = await upload(srv, [file('s.txt', 'abc')], { path: `/api/v1/upload/${token}` });
      assert.equal(small.status, 200, JSON.stringify(small.json));
      assertNoServerErrors(srv);
    });

    /** The bundle a HEAD's completion headers name holds exactly `data`, as file `name`. */
    const assertFiled = async (told: TusRes, name: string, data: Buffer): Promise<void> => {
      const code = told.headers['sluice-short-code'];
      assert.ok(code, `the HEAD tells the link: ${JSON.stringify(told.headers)}`);
      const info = await call(srv, 'GET', `/api/v1/bundle/${code}`, { json: true });
      assert.equal(info.status, 200);
      const [f] = info.json.files as Array<{ id: number; name: string }>;
      assert.equal(f!.name, name);
      const dl = await request(`${srv.url}/api/v1/download/${f!.id}`);
      assert.equal(sha(Buffer.from(await dl.body.arrayBuffer())), sha(data));
    };

    /** Locks the bundles table while `during` runs: a completion's insert of its new bundle waits meanwhile. */
    const bundlesLocked = (during: () => Promise<void>): Promise<void> =>
      srv.sql.begin(async (tx) => {
        await tx`lock table bundles in exclusive mode`;
        await during();
      }).then(() => {});
    const insertWaits = async (): Promise<void> => {
      await waitFor('the completion to wait on the table', async () =>
        (await srv.sql`select 1 from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%insert into bundles%'`).length > 0);
    };
    /** An upload of `data` whose final PATCH failed in its completion (a file row refused by a constraint); its path. */
    const completionFailed = async (data: Buffer, name: string): Promise<string> => {
      const loc = await tusCreate(srv, data.length, { 'upload-metadata': tusMeta({ filename: name }) });
      await srv.sql.unsafe(`alter table files add constraint test_refused check (name <> '${name}') not valid`); // DDL takes no parameters
      let failed: TusRes;
      try {
        failed = await tusPatch(srv, loc, 0, data);
      } finally {
        await srv.sql`alter table files drop constraint test_refused`;
      }
      assert.ok(failed.status >= 500, `the completion failed: ${failed.status} ${failed.body}`);
      await logCheckpoint(srv);
      markLog(srv); // that failure was logged, as it should be
      return loc;
    };
    const assertStillCompleting = (r: TusRes): void => {
      assert.equal(r.status, 423, r.body);
      assert.equal(r.headers['retry-after'], '1');
      assert.equal(r.headers['sluice-short-code'], undefined);
    };

    // tus clients (tus-js-client among them) resume with a HEAD after a failed request and take
    // Upload-Offset == Upload-Length for success: that HEAD must finish what the PATCH could not.
    test('a final PATCH whose completion failed: the next HEAD completes the upload and tells its link', async () => {
      const data = randomBytes(3000);
      const loc = await completionFailed(data, 'refused.bin');
      // While another holder (here the test's own session) has the upload's lock, the HEAD waits, then 423.
      const id = uploadPath(loc).split('/').pop()!;
      const holder = await srv.sql.reserve();
      try {
        await holder`select pg_advisory_lock(hashtextextended(${id}, 0))`;
        assertStillCompleting(await tusCall(srv, 'HEAD', loc));
        await holder`select pg_advisory_unlock(hashtextextended(${id}, 0))`;
      } finally {
        holder.release();
      }
      const head = await tusCall(srv, 'HEAD', loc);
      assert.equal(head.status, 200, head.body);
      assert.equal(head.headers['upload-offset'], String(data.length));
      await assertFiled(head, 'refused.bin', data);
      assert.equal((await tusCall(srv, 'HEAD', loc)).headers['sluice-short-code'], head.headers['sluice-short-code'], 'once');
      assertNoServerErrors(srv);
    });

    test('a completion that outlasts the HEAD\'s wait goes on without it: 423, then the link', async () => {
      const data = randomBytes(3000);
      const loc = await completionFailed(data, 'late.bin');
      await bundlesLocked(async () => {
        const head = tusCall(srv, 'HEAD', loc); // completes the upload, its insert held up
        await insertWaits();
        assertStillCompleting(await head);
      });
      const told = await waitFor('the completion to end', async () => {
        const r = await tusCall(srv, 'HEAD', loc);
        return r.headers['sluice-short-code'] ? r : null;
      });
      await assertFiled(told, 'late.bin', data);
      assertNoServerErrors(srv);
    });

    test('a HEAD while the final PATCH completes the upload waits for it and tells the same link', async () => {
      const data = randomBytes(3000);
      const loc = await tusCreate(srv, data.length, { 'upload-metadata': tusMeta({ filename: 'slow.bin' }) });
      const other = await tusCreate(srv, 10);
      let patched!: Promise<TusRes>;
      let head!: Promise<TusRes>;
      await bundlesLocked(async () => {
        // Its PATCH holds the upload's lock, its bytes on record.
        patched = tusPatch(srv, loc, 0, data);
        await insertWaits();
        head = tusCall(srv, 'HEAD', loc);
        // Answered before the table is let go, it could only have called the upload whole without a link.
        // The HEAD of an unfinished upload, sent after it, takes the same path up to the completion.
        const early = await Promise.race([head.then(() => true), tusCall(srv, 'HEAD', other).then(() => false)]);
        assert.equal(early, false, 'the HEAD waits for the completion');
      });
      const [done, told] = await Promise.all([patched, head]);
      assert.equal(done.status, 204, done.body);
      assert.equal(told.status, 200, told.body);
      assert.equal(told.headers['sluice-short-code'], done.headers['sluice-short-code']);
      await assertFiled(told, 'slow.bin', data);
      assertNoServerErrors(srv);
    });

    test('a PATCH whose client leaves during its admission wedges nothing: the upload takes the next PATCH', async () => {
      // A PATCH takes the upload's lock at admission. Its read of the row is held up here (the table
      // locked) until the client has reset the connection: whether the server notices before its
      // handler runs or only when the handler reads the body, the lock must go with the request.
      const loc = await tusCreate(srv, 1000);
      await srv.sql.begin(async (tx) => {
        await tx`lock table tus_uploads in access exclusive mode`;
        const conn = await rawConnect(srv.port);
        await write(conn.sock, `PATCH ${loc} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n` +
          `Content-Type: application/offset+octet-stream\r\nContent-Length: 1000\r\n\r\n`);
        await waitFor('the admission to wait on the table', async () =>
          (await srv.sql`select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like '%tus_uploads%'`).length > 0);
        conn.sock.resetAndDestroy();
        // A request sent after the reset, answered: the server's loop has been past it.
        assert.equal((await call(srv, 'GET', '/healthz')).status, 200);
      });
      await waitFor('the upload to take a PATCH again', async () => (await tusPatch(srv, loc, 0, randomBytes(1000))).status === 204);
      assertNoServerErrors(srv);
    });
  });
}
