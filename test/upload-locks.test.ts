/**
 * tus upload locks: one holder across processes, freed with the holder's database session (a dead
 * node frees its uploads at once), and a writer whose session was lost records nothing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import postgres from 'postgres';
import type { Sql } from '../src/db/sql.ts';
import { createUploadLocks, type UploadLocks } from '../src/db/upload-locks.ts';
import { insertUpload, setProgress } from '../src/db/tus-uploads.ts';
import { AppError } from '../src/errors.ts';
import { backends } from './helpers/server.ts';
import { database } from './helpers/database.ts';
import { waitFor } from './helpers/wait.ts';

const ID = 'a'.repeat(32);

for (const backend of backends().filter((b) => b !== 's3')) {
  describe(`upload locks (${backend})`, () => {
    let first: Awaited<ReturnType<typeof database>>;
    let second: { sql: Sql; uploadLocks: UploadLocks };
    let lockSession: Sql;
    before(async () => {
      first = await database(backend);
      // Another process's view of the same database: a connection and a lock session of its own.
      const options = first.db.sql.options as unknown as postgres.Options<Record<string, never>>;
      const sql = postgres({ ...options, max: 1 }) as unknown as Sql;
      lockSession = postgres({ ...options, max: 1 }) as unknown as Sql;
      second = { sql, uploadLocks: createUploadLocks(lockSession) };
      await insertUpload(first.db.sql, {
        id: ID, bundle_id: null, new_bundle: null, api_key_id: null, upload_length: 10, max_bytes: 10,
        file_name: 'f', mime_type: 'application/octet-stream', metadata: '', concat: null, expires_at: new Date(Date.now() + 3_600_000),
      });
    });
    after(async () => {
      await second?.sql.end();
      await lockSession?.end();
      await first?.drop();
    });

    test('one holder at a time, in one process and across two; released, it can be taken again', async () => {
      const held = await first.db.uploadLocks.take(ID);
      assert.ok(held);
      assert.equal(await first.db.uploadLocks.take(ID), null, 'a second request of the same process');
      assert.equal(await second.uploadLocks.take(ID), null, 'a request of another process');
      await setProgress(first.db.sql, ID, 4, 10, held);
      await held.release();
      const other = await second.uploadLocks.take(ID);
      assert.ok(other, 'free once released');
      await other.release();
    });

    test('a lost database session frees the upload at once, and its writer records nothing', async () => {
      const held = await first.db.uploadLocks.take(ID);
      assert.ok(held);
      // What a node's death (or a cut connection) does to its session.
      await second.sql`select pg_terminate_backend(${held.pid})`;
      const taken = await waitFor('the lock to pass to the other process', () => second.uploadLocks.take(ID), 5_000);
      await assert.rejects(setProgress(first.db.sql, ID, 8, 10, held), (e: unknown) => e instanceof AppError && e.status === 503);
      assert.equal((await first.db.sql`select upload_offset from tus_uploads where id = ${ID}`)[0]!.upload_offset, 4, 'nothing recorded');
      await setProgress(second.sql, ID, 8, 10, taken);
      await held.release(); // a no-op in the new session
      assert.equal(await first.db.uploadLocks.take(ID), null, 'the new holder keeps it');
      await taken.release();
      const again = await first.db.uploadLocks.take(ID);
      assert.ok(again, 'the first process takes it again over a new session');
      await again.release();
    });
  });
}
