import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { backends } from './helpers/server.ts';
import { database } from './helpers/database.ts';
import type { Sql } from '../src/db/sql.ts';
import type { NewBundle, NewFile } from '../src/db/bundles.ts';
import { newShortCode } from '../src/util/tokens.ts';
import { createBundleWriter } from '../src/db/bundle-writer.ts';

const bundle = (over: Partial<NewBundle> = {}): NewBundle => ({
  uploadTokenHash: randomBytes(32),
  description: null,
  accessPasswordHash: null,
  notifyEmail: null,
  isEncrypted: false,
  apiKeyId: null,
  maxSizeBytes: 1 << 30,
  expiresAt: new Date(Date.now() + 86_400_000),
  ...over,
});
const file = (name: string, size = 10): NewFile => ({
  storageKey: randomBytes(16).toString('hex'),
  name,
  size,
  mimeType: 'text/plain',
  crc32: 7,
});

for (const backend of backends()) {
  describe(`new bundles committed in groups (${backend})`, () => {
    let env: Awaited<ReturnType<typeof database>>;
    let sql: Sql;
    /** How many statements wrote bundles (each bundle of a statement shares its transaction id). */
    const statementsSince = async (firstId: number): Promise<number> => {
      const [r] = await sql<{ n: number }[]>`select count(distinct xmin::text)::int as n from bundles where id >= ${firstId}`;
      return r!.n;
    };
    const nextId = async (): Promise<number> => {
      const [r] = await sql<{ id: number }[]>`select coalesce(max(id), 0)::int8 + 1 as id from bundles`;
      return Number(r!.id);
    };
    before(async () => {
      env = await database(backend);
      sql = env.db.sql;
    });
    after(() => env?.drop());

    test('concurrent bundles share statements, and each gets its own rows back, committed and in order', async () => {
      const writer = createBundleWriter({ sql });
      const first = await nextId();
      const asks = Array.from({ length: 40 }, (_, i) =>
        bundle({ description: `bundle ${i}`, isEncrypted: i % 2 === 0, notifyEmail: i % 3 === 0 ? `u${i}@example.com` : null,
          expiresAt: i % 5 === 0 ? null : new Date(Date.now() + 86_400_000) }));
      const files = asks.map((_, i) => Array.from({ length: (i % 3) + 1 }, (_, k) => file(`b${i}-f${k}.txt`, 100 * i + k)));
      const got = await Promise.all(asks.map((b, i) => writer.insert(b, files[i]!)));
      got.forEach((g, i) => {
        assert.equal(g.bundle.description, `bundle ${i}`);
        assert.equal(g.bundle.is_encrypted, i % 2 === 0);
        assert.equal(g.bundle.notify_email, i % 3 === 0 ? `u${i}@example.com` : null);
        assert.equal(g.bundle.expires_at === null, i % 5 === 0);
        assert.equal(Number(g.bundle.total_size_bytes), files[i]!.reduce((n, f) => n + f.size, 0));
        assert.equal(g.bundle.file_count, files[i]!.length);
        assert.deepEqual(g.files.map((f) => f.name), files[i]!.map((f) => f.name));
        assert.ok(g.files.every((f) => Number(f.bundle_id) === Number(g.bundle.id)));
        assert.equal(Buffer.from(g.bundle.upload_token_hash).toString('hex'), asks[i]!.uploadTokenHash.toString('hex'));
      });
      for (const g of got) {
        const inOrder = await sql<{ id: number }[]>`select id from files where bundle_id = ${g.bundle.id} order by seq`;
        assert.deepEqual(inOrder.map((r) => Number(r.id)), g.files.map((f) => Number(f.id)), 'files are numbered in upload order');
      }
      assert.equal(new Set(got.map((g) => g.bundle.short_code)).size, 40);
      const [rows] = await sql<{ n: number }[]>`select count(*)::int as n from files f join bundles b on b.id = f.bundle_id where b.id >= ${first}`;
      assert.equal(rows!.n, files.flat().length);
      // The first goes alone; the other 39 waited for it and went together.
      assert.equal(await statementsSince(first), 2);
    });

    test('a bundle whose data the database refuses fails alone; the rest of its group is written', async () => {
      const writer = createBundleWriter({ sql });
      await writer.insert(bundle(), [file('warm.txt')]);
      const bad = bundle({ description: 'x'.repeat(1001) }); // the check allows 1000 characters
      const all = await Promise.allSettled([
        writer.insert(bundle(), [file('lead.txt')]),
        writer.insert(bundle({ description: 'ok 1' }), [file('a.txt')]),
        writer.insert(bad, [file('bad.txt')]),
        writer.insert(bundle({ description: 'ok 2' }), [file('b.txt')]),
      ]);
      assert.deepEqual(all.map((r) => r.status), ['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
      assert.equal((all[2] as PromiseRejectedResult).reason.code, '23514');
      const [n] = await sql<{ n: number }[]>`select count(*)::int as n from files where name = 'bad.txt'`;
      assert.equal(n!.n, 0);
    });

    test('with hashes recorded: a bundle holding a blocked one is refused, the rest of its group written; a bad one still fails alone', async () => {
      const writer = createBundleWriter({ sql });
      const hashed = (name: string, sha256 = randomBytes(32).toString('hex')): NewFile => ({ ...file(name), sha256 });
      const blocked = randomBytes(32).toString('hex');
      await sql`insert into blocked_hashes (sha256, reason, created_by) values (${Buffer.from(blocked, 'hex')}, 'test', 'test')`;
      try {
        const all = await Promise.allSettled([
          writer.insert(bundle(), [hashed('h-lead.txt')]),
          writer.insert(bundle({ description: 'ok 1' }), [hashed('h-a.txt'), file('h-plain.txt')]),
          writer.insert(bundle(), [hashed('h-fine.txt'), hashed('h-blocked.txt', blocked)]),
          writer.insert(bundle({ description: 'x'.repeat(1001) }), [hashed('h-bad.txt')]),
          writer.insert(bundle({ description: 'ok 2' }), [hashed('h-b.txt')]),
        ]);
        assert.deepEqual(all.map((r) => r.status), ['fulfilled', 'fulfilled', 'rejected', 'rejected', 'fulfilled']);
        assert.equal((all[2] as PromiseRejectedResult).reason.code, 'BLOCKED_CONTENT');
        assert.equal((all[3] as PromiseRejectedResult).reason.code, '23514');
        const names = (await sql<{ name: string }[]>`select name from files where name like 'h-%' order by seq`).map((r) => r.name);
        assert.deepEqual(names, ['h-lead.txt', 'h-a.txt', 'h-plain.txt', 'h-b.txt']);
      } finally {
        await sql`delete from blocked_hashes where sha256 = ${Buffer.from(blocked, 'hex')}`;
      }
    });

    test('a taken short code is drawn again; only a bundle that never finds a free one fails', async () => {
      const taken = (await createBundleWriter({ sql }).insert(bundle(), [file('first.txt')])).bundle.short_code;
      // Every bundle is offered the taken code first, then a fresh one.
      let offerTaken = true;
      const writer = createBundleWriter({
        sql,
        newCode: () => {
          offerTaken = !offerTaken;
          return offerTaken ? newShortCode() : taken;
        },
      });
      const got = await writer.insert(bundle({ description: 'second' }), [file('second.txt')]);
      assert.notEqual(got.bundle.short_code, taken);
      assert.deepEqual(got.files.map((f) => f.name), ['second.txt']);

      const stuck = createBundleWriter({ sql, newCode: () => taken });
      await assert.rejects(stuck.insert(bundle(), [file('never.txt')]), /no free short code/);
      const [n] = await sql<{ n: number }[]>`select count(*)::int as n from files where name = 'never.txt'`;
      assert.equal(n!.n, 0);
    });

    test('a database that is gone fails every waiting bundle at once', async () => {
      const other = await database(backend);
      const writer = createBundleWriter({ sql: other.db.sql });
      await writer.insert(bundle(), [file('x.txt')]);
      await other.db.close();
      const all = await Promise.allSettled([1, 2, 3].map(() => writer.insert(bundle(), [file('y.txt')])));
      assert.ok(all.every((r) => r.status === 'rejected'));
      await other.drop().catch(() => {});
    });
  });
}
