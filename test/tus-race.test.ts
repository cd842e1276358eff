// Concurrent tus creations into one bundle: exactly the uploads that fit are admitted, on both
// backends (PostgreSQL runs them on several connections at once), and /status counts reservations.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { OCTETS, tusCall, tusMeta, tusPatch, uploadPath } from './helpers/tus.ts';
import { MiB, assertNoServerErrors } from './upload-util.ts';
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
  });
}
