/**
 * Every request gets an answer: uWS closes a connection silent for 10 s even while its response is
 * being worked on, so a request whose result is held up (here, the database: a table locked by an
 * operator's open transaction) gets 503 with Retry-After within that time instead of a reset.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { upload } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

for (const backend of backends().filter((b) => b !== 's3')) {
  describe(`a held-up request is answered (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    test('an upload whose commit waits on a locked table gets 503 with Retry-After before uWS would close it; then the server serves again', async () => {
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      let locked!: () => void;
      const isLocked = new Promise<void>((r) => (locked = r));
      const tx = srv.sql.begin(async (t) => {
        await t`lock table bundles in access exclusive mode`;
        locked();
        await held;
      });
      try {
        await isLocked;
        const t0 = performance.now();
        const r = await upload(srv, [{ name: 'held.txt', data: 'x'.repeat(1000) }]);
        const took = performance.now() - t0;
        assert.equal(r.status, 503, r.text);
        assert.equal(r.json.code, 'UNAVAILABLE');
        assert.equal(r.headers['retry-after'], '5');
        assert.ok(took < 9_500, `answered after ${took.toFixed(0)} ms: uWS closes at 10 s`);
      } finally {
        release();
        await tx;
      }
      const metrics = await (await fetch(`${srv.url}/metrics`)).text();
      assert.match(metrics, /^sluice_requests_unanswered_total 1$/m);
      await waitFor('uploads to go through again', async () => (await upload(srv, [{ name: 'ok.txt', data: 'y' }])).status === 201);
    });
  });
}
