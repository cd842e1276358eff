/**
 * tus upload locks: one holder across processes, freed with the holder's database session (a dead
 * node frees its uploads at once), and a writer whose session was lost records nothing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import postgres from 'postgres';
import type { Sql } from '../src/db/sql.ts';
import { createUploadLocks, type UploadLocks } from '../src/db/upload-locks.ts';
import { holdUpload, insertUpload, recordProgress } from '../src/db/tus-uploads.ts';
import { AppError } from '../src/errors.ts';
import { backends } from './helpers/server.ts';
import { database } from './helpers/database.ts';
import { waitFor } from './helpers/wait.ts';

const ID = 'a'.repeat(32);

/** Takes ID's lock alone (null while held elsewhere). */
const take = async (locks: UploadLocks) => (await locks.take(ID, (s) => s`select 1`)).lock;

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
      const held = await take(first.db.uploadLocks);
      assert.ok(held);
      assert.equal(await take(first.db.uploadLocks), null, 'a second request of the same process');
      assert.equal(await take(second.uploadLocks), null, 'a request of another process');
      await recordProgress(held, ID, 4, 10, false);
      await held.release();
      const other = await take(second.uploadLocks);
      assert.ok(other, 'free once released');
      await other.release();
    });

    test('a lost database session frees the upload at once, and its writer records nothing', async () => {
      const held = await take(first.db.uploadLocks);
      assert.ok(held);
      // What a node's death (or a cut connection) does to its session.
      await second.sql`select pg_terminate_backend(${held.pid})`;
      const taken = await waitFor('the lock to pass to the other process', () => take(second.uploadLocks), 5_000);
      await assert.rejects(recordProgress(held, ID, 8, 10, false), (e: unknown) => e instanceof AppError && e.status === 503);
      assert.equal((await first.db.sql`select upload_offset from tus_uploads where id = ${ID}`)[0]!.upload_offset, 4, 'nothing recorded');
      await recordProgress(taken, ID, 8, 10, false);
      await held.release(); // a no-op in the new session
      assert.equal(await take(first.db.uploadLocks), null, 'the new holder keeps it');
      await taken.release();
      const again = await take(first.db.uploadLocks);
      assert.ok(again, 'the first process takes it again over a new session');
      await again.release();
    });

    test('the row is read behind the lock, and the lock goes with the last record in the same round trip', async () => {
      const held = await holdUpload(first.db.uploadLocks, ID);
      assert.ok(held && held !== 'locked');
      assert.equal(held.row.upload_offset, 8);
      assert.equal(await holdUpload(second.uploadLocks, ID), 'locked', 'held elsewhere, the row still tells it exists');
      await recordProgress(held.lock, ID, 9, 10, true);
      // Free as soon as the record resolved, and whoever takes it next sees the record.
      const next = await holdUpload(second.uploadLocks, ID);
      assert.ok(next && next !== 'locked', 'free right after the record');
      assert.equal(next.row.upload_offset, 9);
      await next.lock.release();
      assert.equal(await holdUpload(second.uploadLocks, 'b'.repeat(32)), undefined, 'no such upload: nothing held');
    });

    test('a lock let go while another process tries it is taken by that process\'s next try', async () => {
      // A PATCH's holder answers before its unlock is sent: the client's next PATCH may reach
      // another process first. Its try is refused, and tried again.
      let tries = 0;
      let secondTry: () => void = () => {};
      const triedTwice = new Promise<void>((r) => (secondTry = r));
      const options = first.db.sql.options as unknown as postgres.Options<Record<string, never>>;
      const watched = postgres({
        ...options,
        max: 1,
        debug: (_conn: number, query: string) => {
          if (query.includes('pg_try_advisory_lock') && ++tries === 2) secondTry();
        },
      }) as unknown as Sql;
      try {
        const held = await take(first.db.uploadLocks);
        assert.ok(held);
        const trying = take(createUploadLocks(watched));
        const outcome = await Promise.race([triedTwice.then(() => 'tried again'), trying.then(() => 'answered')]);
        assert.equal(outcome, 'tried again', 'a refused try is tried again');
        await held.release();
        const taken = await trying;
        assert.ok(taken, `taken after ${tries} tries`);
        await taken.release();
      } finally {
        await watched.end();
      }
    });
  });
}
