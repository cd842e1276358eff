/**
 * Zip plans of a bundle larger than one slice: concurrent requests share one build, and no turn of
 * the event loop handles more than one slice of files. Counted, not timed: the event-loop figures
 * under a flood are bench/large-bundle.ts's.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { created } from './upload-util.ts';
import { file, upload } from './helpers/http.ts';
import { createZipPlans } from '../src/zip/plan.ts';
import { LAYOUT_SLICE } from '../src/zip/layout.ts';
import { zipEtag } from '../src/routes/zip.ts';
import pino from 'pino';
import { connectDb, type Db } from '../src/db/client.ts';
import { waitFor } from './helpers/wait.ts';

const COUNT = 2 * LAYOUT_SLICE + 200;

for (const backend of backends()) {
  describe(`zip plans of ${COUNT} files (${backend})`, () => {
    let srv: TestServer;
    let code: string;
    let bundleId: number;
    let db: Db; // the server's own client settings (its int8 and date parsers), on its database
    before(async () => {
      srv = await startServer(backend);
      db = await connectDb({ databaseUrl: srv.env.DATABASE_URL, dataDir: srv.dataDir, log: pino({ level: 'silent' }), max: 1 });
      const names = Array.from({ length: COUNT }, (_, i) => file(`f${i}.txt`, `${i}`));
      const b = await created(srv, names.slice(0, 1000)); // one request's file limit
      const more = await upload(srv, names.slice(1000), { path: `/api/v1/upload/${b.upload_token}` });
      assert.ok(more.status < 300, JSON.stringify(more.json));
      code = b.short_code;
      bundleId = (await srv.sql<{ id: number }[]>`select id::int as id from bundles where short_code = ${code}`)[0]!.id;
    });
    after(async () => {
      await db?.close();
      await srv?.close();
    });

    test('sixteen concurrent plans cost one build, done a slice of files per turn of the loop', async () => {
      let builds = 0;
      let sinceTurn = 0;
      let worst = 0;
      const plans = createZipPlans({
        sql: db.sql,
        etag: () => (builds++, zipEtag()),
        keyOf: (f) => (sinceTurn++, `/nowhere/${f.storage_key}`),
      });
      let ticking = true;
      const tick = (): void => {
        worst = Math.max(worst, sinceTurn);
        sinceTurn = 0;
        if (ticking) setImmediate(tick);
      };
      setImmediate(tick);
      const all = await Promise.all(Array.from({ length: 16 }, () => plans.plan(bundleId)));
      ticking = false;
      assert.equal(builds, 1);
      for (const p of all) assert.equal(p, all[0]);
      assert.equal(all[0]!.keys.length, COUNT);
      assert.ok(worst > 0 && worst <= LAYOUT_SLICE, `at most ${LAYOUT_SLICE} files between turns, saw ${worst}`);
      assert.equal(await plans.plan(bundleId), all[0], 'kept while the files are unchanged');
    });

    test('concurrent share-page views are all counted (in batches)', async () => {
      const views = async (): Promise<number> =>
        (await srv.sql<{ n: number }[]>`select view_count::int as n from bundles where id = ${bundleId}`)[0]!.n;
      const before = await views();
      await Promise.all(
        Array.from({ length: 20 }, async () => {
          const r = await request(`${srv.url}/${code}`);
          await r.body.text();
          assert.equal(r.statusCode, 200);
        }),
      );
      await waitFor('20 views to be counted', async () => (await views()) === before + 20);
    });
  });
}
