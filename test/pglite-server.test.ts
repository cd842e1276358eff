import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { PGlite } from '@electric-sql/pglite';
import { waitFor } from './helpers/wait.ts';
import { servePglite, type PgliteServer } from '../src/db/pglite-server.ts';

// The embedded database is one PGlite session behind a Unix socket shared by the server, the CLI
// and other workers: their queries must never run inside one another's.
describe('embedded database socket', () => {
  let dir: string;
  let pg: PGlite;
  let server: PgliteServer;
  let socketPath: string;
  const clients: postgres.Sql[] = [];
  const connect = (): postgres.Sql => {
    const sql = postgres({ path: socketPath, user: 'postgres', database: 'postgres', max: 1, onnotice: () => {} });
    clients.push(sql);
    return sql;
  };

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-pglite-'));
    socketPath = path.join(dir, '.s.PGSQL.5432');
    pg = await PGlite.create();
    server = await servePglite(pg, socketPath);
    await pg.exec('create table t (id serial primary key, who text not null, n int not null)');
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.end({ timeout: 1 }).catch(() => {})));
    await server.close();
    await pg.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('concurrent parameterized queries from several connections each get their own rows', async () => {
    const conns = [connect(), connect(), connect()];
    const work = conns.flatMap((sql, c) =>
      Array.from({ length: 200 }, async (_, i) => {
        // A fresh statement text per round keeps Parse/Describe (a Flush) in the exchange.
        const [row] = await sql<{ who: string; n: number; pad: string }[]>`
          select ${`conn${c}`}::text as who, ${i}::int as n, ${'x'.repeat(i * 10)}::text as pad, ${i % 7}::int as k${sql.unsafe(String(i % 3))}`;
        assert.equal(row?.who, `conn${c}`);
        assert.equal(row?.n, i);
        assert.equal(row?.pad.length, i * 10);
      }),
    );
    await Promise.all(work);
  });

  it("a query split across writes is not broken by another connection's query in between", async () => {
    // A client's Bind and Execute can arrive in separate reads (postgres.js flushes a Bind over
    // 1 KiB at once). Another connection's Sync in between used to drop the unnamed portal.
    const raw = await rawConnect(socketPath);
    const other = connect();
    await raw.send(Buffer.concat([msg('P', cstr(''), cstr('select $1::text as v'), i16(0)), bind('mine')]));
    await new Promise((r) => setTimeout(r, 30)); // the subject: the Bind is in before the other query (no event shows it)
    const [theirs] = await other<{ v: string }[]>`select ${'theirs'}::text as v`;
    assert.equal(theirs?.v, 'theirs');
    await raw.send(Buffer.concat([msg('E', cstr(''), i32(0)), msg('S')]));
    const reply = await raw.until('Z');
    assert.doesNotMatch(reply, /portal/, JSON.stringify(reply));
    assert.match(reply, /D.*mine/s, JSON.stringify(reply));
    raw.close();
  });

  it('a client that dies between Flush and Sync leaves nothing behind (its implicit transaction rolls back)', async () => {
    const raw = await rawConnect(socketPath);
    await raw.send(Buffer.concat([
      msg('P', cstr(''), cstr("insert into t (who, n) values ('flushed', 1)"), i16(0)),
      msg('B', cstr(''), cstr(''), i16(0), i16(0), i16(0)),
      msg('E', cstr(''), i32(0)),
      msg('H'),
    ]));
    await raw.until('C'); // the insert ran; no Sync yet
    raw.close();
    const other = connect();
    // Checkpoint: the clean-up runs once the server has seen the close.
    await waitFor('the flushed insert rolled back', async () => (await other`select 1 from t where who = 'flushed'`).length === 0);
    const rows = await other`select 1 from t where who = 'flushed'`;
    assert.equal(rows.length, 0);
  });

  it("a closed connection's prepared statements do not pile up in the shared session", async () => {
    const count = async (): Promise<number> => {
      const r = await pg.query<{ n: number }>('select count(*)::int as n from pg_prepared_statements');
      return r.rows[0]!.n;
    };
    const before = await count();
    for (let i = 0; i < 5; i++) {
      const sql = postgres({ path: socketPath, user: 'postgres', database: 'postgres', max: 1, onnotice: () => {} });
      for (let q = 0; q < 4; q++) await sql`select ${q}::int + ${i}::int as v`;
      await sql.end({ timeout: 1 });
    }
    // Each closed connection's clean-up runs once the server has seen the close: poll, not a fixed sleep.
    await waitFor(`prepared statements back to ${before}`, async () => (await count()) <= before, 2000);
    assert.ok((await count()) <= before, `prepared statements: ${before} before, ${await count()} after`);
  });

  it('a transaction keeps the session until it ends; others wait instead of joining it', async () => {
    const [a, b] = [connect(), connect()];
    let aInside = false;
    const inA = a.begin(async (tx) => {
      await tx`insert into t (who, n) values ('a', 1)`;
      aInside = true;
      await new Promise((r) => setTimeout(r, 100)); // the subject: a holds its transaction while b asks (no event shows b's query arrived)
      await tx`insert into t (who, n) values ('a', 2)`;
      throw new Error('roll back');
    }).then(() => 'committed', (e: Error) => e.message);
    await waitFor("a's transaction to start", () => aInside);
    // b's write lands after a's transaction, outside it: a's rollback must not take it along.
    await b`insert into t (who, n) values ('b', 1)`;
    assert.equal(await inA, 'roll back');
    const rows = await b<{ who: string }[]>`select who from t order by id`;
    assert.deepEqual(rows.map((r) => r.who), ['b']);
  });

  it('a connection that dies inside a transaction is rolled back and the others go on', async () => {
    const dying = connect();
    const other = connect();
    const reserved = await dying.reserve();
    await reserved`begin`;
    await reserved`insert into t (who, n) values ('dying', 1)`;
    const waiting = other`insert into t (who, n) values ('other', 1)`; // queued behind the transaction
    await new Promise((r) => setTimeout(r, 50)); // the subject: the insert reaches the server before the close (no event shows it)
    await dying.end({ timeout: 0 }); // closes the socket without commit
    await waiting;
    const rows = await other<{ who: string }[]>`select who from t where who in ('dying', 'other') order by id`;
    assert.deepEqual(rows.map((r) => r.who), ['other']);
  });
});

const cstr = (v: string): Buffer => Buffer.from(`${v}\0`);
const i16 = (n: number): Buffer => Buffer.from([(n >> 8) & 255, n & 255]);
const i32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
};
function msg(type: string, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  return Buffer.concat([Buffer.from(type, 'latin1'), i32(4 + body.length), body]);
}
const bind = (value: string): Buffer =>
  msg('B', cstr(''), cstr(''), i16(0), i16(1), i32(Buffer.byteLength(value)), Buffer.from(value), i16(0));

/** A bare wire-protocol client: started up, then raw messages in and text out. */
async function rawConnect(socketPath: string): Promise<{ send(b: Buffer): Promise<void>; until(type: string): Promise<string>; close(): void }> {
  const sock = net.connect(socketPath);
  await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
  let got = '';
  const waiters: Array<() => void> = [];
  sock.on('data', (d: Buffer) => {
    got += d.toString('latin1');
    for (const w of waiters.splice(0)) w();
  });
  const send = (b: Buffer): Promise<void> => new Promise((resolve) => sock.write(b, () => resolve()));
  /** Resolves with everything received once a message of `type` (ReadyForQuery: Z) has arrived. */
  const until = async (type: string): Promise<string> => {
    for (;;) {
      const at = got.lastIndexOf(`${type}\0\0\0`);
      if (at >= 0) {
        const out = got;
        got = '';
        return out;
      }
      await new Promise<void>((r) => waiters.push(r));
    }
  };
  const params = Buffer.concat([cstr('user'), cstr('postgres'), cstr('database'), cstr('postgres'), Buffer.from([0])]);
  await send(Buffer.concat([i32(8 + params.length), i32(196608), params]));
  await until('Z');
  return { send, until, close: () => sock.destroy() };
}
