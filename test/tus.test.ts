import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import zlib from 'node:zlib';
import { request } from 'undici';
import { backends, resumableBytes, resumableIds, startServer, type TestServer } from './helpers/server.ts';
import { assertNoServerErrors, ensureRunning, MiB, rawConnect, sha, write } from './upload-util.ts';
import { waitFor } from './helpers/wait.ts';
import { call, type Res } from './helpers/http.ts';
import { uploadLocked } from './helpers/tus.ts';
import { mintKey } from './access-util.ts';

const CAP = 8 * MiB;
const RATE = 5;
let ipSeq = 0;
/** Each request comes from its own address (TRUST_PROXY) unless a test pins one: only the rate-limit test shares a budget. */
const nextIp = (): string => `10.77.${Math.floor(ipSeq / 250) % 250}.${(ipSeq++ % 250) + 1}`;

/** A tus request, from a fresh address unless `headers` pins one. */
const tus = (srv: TestServer, method: string, urlPath: string, headers: Record<string, string> = {}, body?: Buffer): Promise<Res> =>
  call(srv, method, urlPath, { headers: { 'tus-resumable': '1.0.0', 'x-forwarded-for': nextIp(), ...headers }, body });

const meta = (o: Record<string, string>): string =>
  Object.entries(o).map(([k, v]) => `${k} ${Buffer.from(v).toString('base64')}`).join(',');

async function create(srv: TestServer, length: number | null, m: Record<string, string> = { filename: 'a.bin' }, extra: Record<string, string> = {}): Promise<string> {
  const lengthHeader: Record<string, string> = length === null ? { 'upload-defer-length': '1' } : { 'upload-length': String(length) };
  const r = await tus(srv, 'POST', '/api/v1/tus/', { ...lengthHeader, 'upload-metadata': meta(m), ...extra });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.headers['tus-resumable'], '1.0.0');
  assert.ok(r.headers['upload-expires'] && Date.parse(r.headers['upload-expires']) > Date.now() + 23 * 3_600_000);
  const location = new URL(r.headers.location!);
  // PORT=0 without BASE_URL: the absolute Location names the port the server actually bound.
  if (srv.env.BASE_URL === undefined) assert.equal(location.port, String(srv.port));
  return location.pathname;
}

const patch = (srv: TestServer, loc: string, offset: number, piece: Buffer, extra: Record<string, string> = {}): Promise<Res> =>
  tus(srv, 'PATCH', loc, { 'content-type': 'application/offset+octet-stream', 'upload-offset': String(offset), ...extra }, piece);

async function patchAll(srv: TestServer, loc: string, data: Buffer, piece: number, from = 0): Promise<Res> {
  let last: Res | undefined;
  for (let at = from; at < data.length; at += piece) {
    last = await patch(srv, loc, at, data.subarray(at, Math.min(at + piece, data.length)));
    assert.equal(last.status, 204, last.text);
    assert.equal(last.headers['upload-offset'], String(Math.min(at + piece, data.length)));
  }
  return last!;
}

async function offsetOf(srv: TestServer, loc: string): Promise<number> {
  const r = await tus(srv, 'HEAD', loc);
  assert.equal(r.status, 200);
  return Number(r.headers['upload-offset']);
}

/** The completed file: downloaded bytes, stored SHA-256 and CRC-32 all match `data`. */
async function assertStored(srv: TestServer, done: Res, data: Buffer, name = 'a.bin'): Promise<void> {
  assert.match(done.headers['sluice-short-code'] ?? '', /^[a-zA-Z0-9]{5}$/);
  assert.equal(done.headers['sluice-share-url'], `/${done.headers['sluice-short-code']}`);
  const id = Number(done.headers['sluice-file-id']);
  const dl = await request(`${srv.url}/api/v1/download/${id}`, { headers: { 'x-forwarded-for': nextIp() } });
  assert.equal(dl.statusCode, 200);
  assert.equal(sha(Buffer.from(await dl.body.arrayBuffer())), sha(data));
  const [row] = await srv.sql<{ crc32: string; name: string; size: string }[]>`
    select crc32::text, name, size::text from files where id = ${id}`;
  assert.deepEqual(row, { crc32: String(zlib.crc32(data)), name, size: String(data.length) });
}

/** Bytes the store holds for the upload at `loc` (null: none), on disk or in a bucket. */
const partOf = (srv: TestServer, loc: string): Promise<number | null> => resumableBytes(srv, path.basename(loc));

for (const backend of backends()) {
  describe(`tus 1.0.0 (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, {
        ANON_MAX_BUNDLE_BYTES: String(CAP),
        RATE_LIMIT_ANON_PER_HOUR: String(RATE),
        TRUST_PROXY: '127.0.0.1',
        SWEEP_INTERVAL_SECONDS: '86400',
      });
    });
    after(async () => {
      await srv?.close();
    });
    beforeEach(async () => {
      await ensureRunning(srv);
    });

    test('OPTIONS announces version, extensions, max size and checksum algorithms', async () => {
      const r = await tus(srv, 'OPTIONS', '/api/v1/tus/', { 'tus-resumable': '' });
      assert.equal(r.status, 204);
      assert.equal(r.headers['tus-version'], '1.0.0');
      for (const ext of ['creation', 'creation-with-upload', 'creation-defer-length', 'termination', 'expiration', 'checksum']) {
        assert.ok(r.headers['tus-extension']!.split(',').includes(ext), ext);
      }
      assert.ok(Number(r.headers['tus-max-size']) >= CAP);
      assert.match(r.headers['tus-checksum-algorithm']!, /sha256/);
    });

    test('creation, HEAD, PATCH in pieces, completion: the bytes come back identical', async () => {
      const data = randomBytes(3 * MiB + 123);
      const loc = await create(srv, data.length, { filename: 'a.bin', filetype: 'application/x-test' });
      assert.equal(await offsetOf(srv, loc), 0);
      const head = await tus(srv, 'HEAD', loc);
      assert.equal(head.headers['upload-length'], String(data.length));
      assert.equal(head.headers['cache-control'], 'no-store');
      const [before] = await srv.sql<{ n: number }[]>`select count(*)::int as n from files`;
      await patchAll(srv, loc, data.subarray(0, MiB), 400_000);
      const [mid] = await srv.sql<{ n: number }[]>`select count(*)::int as n from files`;
      assert.equal(mid!.n, before!.n, 'an unfinished upload is no file yet');
      const done = await patchAll(srv, loc, data, 700_000, MiB);
      assert.match(done.headers['sluice-upload-token'] ?? '', /^[0-9a-f]{64}$/);
      await assertStored(srv, done, data);
      assert.equal(await partOf(srv, loc), null, 'the part became the stored file');
      assert.equal(await offsetOf(srv, loc), data.length);
      assertNoServerErrors(srv);
    });

    test('creation-with-upload completes in one request; an empty file completes at creation', async () => {
      const data = randomBytes(200_000);
      const r = await tus(srv, 'POST', '/api/v1/tus/', {
        'upload-length': String(data.length), 'upload-metadata': meta({ filename: 'one.bin' }), 'content-type': 'application/offset+octet-stream',
      }, data);
      assert.equal(r.status, 201, r.text);
      assert.equal(r.headers['upload-offset'], String(data.length));
      await assertStored(srv, r, data, 'one.bin');
      const empty = await tus(srv, 'POST', '/api/v1/tus/', { 'upload-length': '0', 'upload-metadata': meta({ filename: 'e.txt' }) });
      assert.equal(empty.status, 201, empty.text);
      await assertStored(srv, empty, Buffer.alloc(0), 'e.txt');
    });

    test('a creation answered with an error leaves no session behind, nor holds room in a bundle', async () => {
      const rows = async (): Promise<number> => (await srv.sql<{ n: number }[]>`select count(*)::int as n from tus_uploads where completed_at is null`)[0]!.n;
      // Parts that were not there before (an earlier test's terminated upload may still be losing its part).
      const partsBefore = new Set(await resumableIds(srv));
      const newParts = async (): Promise<string[]> => (await resumableIds(srv)).filter((id) => !partsBefore.has(id));
      const rowsBefore = await rows();
      const body = { 'content-type': 'application/offset+octet-stream' };
      const sum = (b: Buffer): string => `sha256 ${createHash('sha256').update(b).digest('base64')}`;
      const badSum = await tus(srv, 'POST', '/api/v1/tus/', { ...body, 'upload-length': '5', 'upload-checksum': sum(Buffer.from('other')) }, Buffer.from('hello'));
      assert.equal(badSum.status, 460, badSum.text);
      assert.equal(badSum.headers.location, undefined);
      const tooLong = await tus(srv, 'POST', '/api/v1/tus/', { ...body, 'upload-length': '5' }, Buffer.from('hellohello'));
      assert.equal(tooLong.status, 413, tooLong.text);
      assert.deepEqual([await rows(), await newParts()], [rowsBefore, []], 'no row and no part of either');

      // An append whose first bytes fail gives its room back at once.
      const first = await tus(srv, 'POST', '/api/v1/tus/', { ...body, 'upload-length': '1000', 'upload-metadata': meta({ filename: 'a.bin' }) }, randomBytes(1000));
      const token = first.headers['sluice-upload-token']!;
      const room = CAP - 1000;
      const failed = await tus(srv, 'POST', '/api/v1/tus/', {
        ...body, 'upload-length': String(room), 'upload-metadata': meta({ upload_token: token }), 'upload-checksum': sum(Buffer.from('x')),
      }, Buffer.from('y'));
      assert.equal(failed.status, 460, failed.text);
      const next = await create(srv, room, { filename: 'b.bin', upload_token: token });
      assert.equal((await tus(srv, 'DELETE', next)).status, 204);
      assert.equal(await rows(), rowsBefore);
      // Its part goes right after the answer.
      await waitFor('the terminated upload\'s part removed', async () => (await newParts()).length === 0);
    });

    test('creation-defer-length: the length arrives with a later PATCH', async () => {
      const data = randomBytes(300_000);
      const loc = await create(srv, null);
      assert.equal((await patch(srv, loc, 0, data.subarray(0, 100_000))).status, 204);
      const head = await tus(srv, 'HEAD', loc);
      assert.equal(head.headers['upload-defer-length'], '1');
      assert.equal(head.headers['upload-length'], undefined);
      const done = await patch(srv, loc, 100_000, data.subarray(100_000), { 'upload-length': String(data.length) });
      assert.equal(done.status, 204, done.text);
      await assertStored(srv, done, data);
    });

    // On S3 a crash past the offset leaves parts and tails, not bytes at a file's end: the S3 store's own
    // test (test/s3-store.test.ts) cuts those off.
    const appendsToPartFile = backend === 's3' && 'writes junk into the disk store\'s part file behind the server\'s back';
    test('bytes past the offset on record (a PATCH a crash cut off) never reach the file', { skip: appendsToPartFile }, async () => {
      const data = randomBytes(150_000);
      const partOf = (loc: string): string => path.join(srv.dataDir, 'tus', `${loc.split('/').pop()}.part`);
      // deferred length, completed by an empty PATCH: the junk would have been counted
      const a = await create(srv, null);
      assert.equal((await patch(srv, a, 0, data.subarray(0, 100_000))).status, 204);
      fs.appendFileSync(partOf(a), randomBytes(50_000));
      const doneA = await patch(srv, a, 100_000, Buffer.alloc(0), { 'upload-length': '100000' });
      assert.equal(doneA.status, 204, doneA.text);
      await assertStored(srv, doneA, data.subarray(0, 100_000));
      // a later PATCH writing fewer bytes than the junk: the junk's tail would have stayed
      const b = await create(srv, null);
      assert.equal((await patch(srv, b, 0, data.subarray(0, 100_000))).status, 204);
      fs.appendFileSync(partOf(b), randomBytes(80_000));
      const doneB = await patch(srv, b, 100_000, data.subarray(100_000), { 'upload-length': String(data.length) });
      assert.equal(doneB.status, 204, doneB.text);
      await assertStored(srv, doneB, data);
    });

    test('an upload started under a key that is then revoked goes no further (401), and becomes no bundle', async () => {
      const made = await srv.cli(['keys', 'create', '--plan', 'starter']);
      assert.equal(made.code, 0, made.stderr);
      const key = made.stdout.trim();
      const auth = { authorization: `Bearer ${key}` };
      const loc = await create(srv, 2048, { filename: 'k.bin' }, auth);
      const first = await patch(srv, loc, 0, randomBytes(1024), auth);
      assert.equal(first.status, 204, first.text);
      assert.equal((await srv.cli(['keys', 'revoke', key.slice(0, 12)])).code, 0);
      for (const headers of [auth, {}]) {
        const r = await patch(srv, loc, 1024, randomBytes(1024), headers);
        assert.equal(r.status, 401, r.text);
        assert.equal(r.headers['sluice-short-code'], undefined);
      }
      assert.equal(await offsetOf(srv, loc), 1024);
      const [row] = await srv.sql<{ n: string }[]>`select count(*)::text as n from files where name = 'k.bin'`;
      assert.equal(row!.n, '0');
    });

    test('termination removes the session and its part', async () => {
      const loc = await create(srv, 1000);
      await patch(srv, loc, 0, randomBytes(500));
      assert.notEqual(await partOf(srv, loc), null);
      assert.equal((await tus(srv, 'DELETE', loc)).status, 204);
      // The answer comes once the session's row is gone; its part goes right after.
      await waitFor('the part removed', async () => (await partOf(srv, loc)) === null);
      assert.equal((await tus(srv, 'HEAD', loc)).status, 404);
      assert.equal((await patch(srv, loc, 500, randomBytes(10))).status, 404);
    });

    test('checksum: a matching body is kept, a mismatch is 460 and keeps nothing', async () => {
      const data = randomBytes(2000);
      const loc = await create(srv, data.length);
      const digest = (b: Buffer): string => `sha256 ${createHash('sha256').update(b).digest('base64')}`;
      const good = await patch(srv, loc, 0, data.subarray(0, 1000), { 'upload-checksum': digest(data.subarray(0, 1000)) });
      assert.equal(good.status, 204, good.text);
      const bad = await patch(srv, loc, 1000, data.subarray(1000), { 'upload-checksum': digest(randomBytes(8)) });
      assert.equal(bad.status, 460, bad.text);
      assert.equal(await offsetOf(srv, loc), 1000);
      // (an S3 append holds a body shorter than a part in memory: a refused one never reaches the bucket)
      if (backend !== 's3') assert.equal(await partOf(srv, loc), 1000, 'the rejected bytes were cut off');
      const unknown = await patch(srv, loc, 1000, data.subarray(1000), { 'upload-checksum': 'crc99 AAAA' });
      assert.equal(unknown.status, 400);
      const done = await patch(srv, loc, 1000, data.subarray(1000), { 'upload-checksum': digest(data.subarray(1000)) });
      assert.equal(done.status, 204);
      await assertStored(srv, done, data);
    });

    test('bytes a rejected PATCH carried never reach the stored SHA-256 and CRC-32', async () => {
      // Pieces of several MiB at unaligned offsets: whole slots go to disk with O_DIRECT and to the
      // hash worker from memory. The rejected PATCH's bytes differ from the ones sent again after it.
      const data = randomBytes(5 * MiB + 12_345);
      const loc = await create(srv, data.length);
      const digest = (b: Buffer): string => `sha256 ${createHash('sha256').update(b).digest('base64')}`;
      const a = MiB + 100;
      const b = 3 * MiB + 7;
      assert.equal((await patch(srv, loc, 0, data.subarray(0, a))).status, 204);
      const other = randomBytes(b - a);
      const bad = await patch(srv, loc, a, other, { 'upload-checksum': digest(data.subarray(a, b)) });
      assert.equal(bad.status, 460, bad.text);
      assert.equal(await offsetOf(srv, loc), a);
      assert.equal((await patch(srv, loc, a, data.subarray(a, b), { 'upload-checksum': digest(data.subarray(a, b)) })).status, 204);
      const done = await patch(srv, loc, b, data.subarray(b));
      assert.equal(done.status, 204, done.text);
      await assertStored(srv, done, data);
      assertNoServerErrors(srv);
    });

    test('protocol refusals: wrong offset 409, wrong type 415, missing Tus-Resumable 412, past the length 413', async () => {
      const loc = await create(srv, 100);
      assert.equal((await patch(srv, loc, 5, randomBytes(10))).status, 409);
      const wrongType = await tus(srv, 'PATCH', loc, { 'content-type': 'application/octet-stream', 'upload-offset': '0' }, randomBytes(10));
      assert.equal(wrongType.status, 415);
      assert.equal((await patch(srv, loc, 0, randomBytes(10), { 'tus-resumable': '0.2.2' })).status, 412);
      assert.equal((await patch(srv, loc, 0, randomBytes(101))).status, 413);
      assert.equal(await offsetOf(srv, loc), 0);
      assert.equal((await tus(srv, 'HEAD', '/api/v1/tus/0123456789abcdef0123456789abcdef')).status, 404);
      // Metadata PostgreSQL cannot store is refused at creation, not a 500.
      const nul = await tus(srv, 'POST', '/api/v1/tus/', {
        'upload-length': '10', 'upload-metadata': meta({ filename: 'a.bin', description: 'a\u0000b' }),
      });
      assert.equal(nul.status, 400);
    });

    test('concurrent PATCHes to one upload: the second is refused with 423', async () => {
      const data = randomBytes(400_000);
      const loc = await create(srv, data.length);
      const conn = await rawConnect(srv.port);
      await write(conn.sock, `PATCH ${loc} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n` +
        `Content-Type: application/offset+octet-stream\r\nContent-Length: ${data.length}\r\n\r\n`);
      await write(conn.sock, data.subarray(0, 1000));
      const id = path.basename(loc);
      await waitFor('the first PATCH to hold the upload', () => uploadLocked(srv.sql, id));
      const second = await patch(srv, loc, 0, data);
      assert.ok(second.status === 423 || second.status === 409, `${second.status}`);
      await write(conn.sock, data.subarray(1000));
      const first = await conn.response;
      assert.equal(first.status, 204);
      conn.sock.destroy();
      assert.equal(await offsetOf(srv, loc), data.length);
    });

    test('a PATCH cut mid-body keeps what arrived; the client resumes from HEAD and the file is right', async () => {
      // More than an S3 part (6 MiB) before the cut: an S3 append keeps less than a part in memory, so
      // the bucket shows bytes only once a part is in.
      const data = randomBytes(CAP);
      const loc = await create(srv, data.length);
      const conn = await rawConnect(srv.port);
      const half = 7 * MiB;
      await write(conn.sock, `PATCH ${loc} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n` +
        `Content-Type: application/offset+octet-stream\r\nContent-Length: ${data.length}\r\n\r\n`);
      await write(conn.sock, data.subarray(0, half));
      const id = path.basename(loc);
      await waitFor('the server to store some of the bytes', async () => ((await partOf(srv, loc)) ?? 0) > 0);
      conn.sock.destroy();
      await waitFor('the cut PATCH to record its offset and release the upload', async () =>
        !(await uploadLocked(srv.sql, id)) && (await srv.sql<{ n: number }[]>`select upload_offset as n from tus_uploads where id = ${id}`)[0]!.n > 0);
      const offset = await offsetOf(srv, loc);
      assert.ok(offset > 0 && offset <= half, `offset ${offset}`);
      assert.ok(((await partOf(srv, loc)) ?? 0) >= offset, 'every reported byte is stored');
      const done = await patchAll(srv, loc, data, MiB, offset);
      await assertStored(srv, done, data);
      assertNoServerErrors(srv);
    });

    test('the cap counts the declared length at creation, and bytes as they arrive when deferred', async () => {
      const over = await tus(srv, 'POST', '/api/v1/tus/', { 'upload-length': String(CAP + 1) });
      assert.equal(over.status, 413, over.text);
      const loc = await create(srv, null);
      assert.equal((await patch(srv, loc, 0, randomBytes(10), { 'upload-length': String(CAP + 1) })).status, 413);
      const fits = await create(srv, CAP);
      assert.equal(await offsetOf(srv, fits), 0);
    });

    test('upload_token metadata appends to the existing bundle, within its room', async () => {
      const a = randomBytes(1000);
      const first = await tus(srv, 'POST', '/api/v1/tus/', {
        'upload-length': String(a.length), 'upload-metadata': meta({ filename: 'a.bin', description: 'two files' }),
        'content-type': 'application/offset+octet-stream',
      }, a);
      const token = first.headers['sluice-upload-token']!;
      assert.match(token, /^[0-9a-f]{64}$/);
      const b = randomBytes(2000);
      const loc = await create(srv, b.length, { filename: 'b.bin', upload_token: token });
      const done = await patch(srv, loc, 0, b);
      assert.equal(done.headers['sluice-short-code'], first.headers['sluice-short-code']);
      assert.equal(done.headers['sluice-upload-token'], undefined);
      await assertStored(srv, done, b, 'b.bin');
      const [bundle] = await srv.sql<{ n: number; total: string; d: string }[]>`
        select file_count as n, total_size_bytes::text as total, description as d from bundles where short_code = ${done.headers['sluice-short-code']!}`;
      assert.deepEqual(bundle, { n: 2, total: '3000', d: 'two files' });
      const tooBig = await tus(srv, 'POST', '/api/v1/tus/', { 'upload-length': String(CAP - 2000), 'upload-metadata': meta({ upload_token: token }) });
      assert.equal(tooBig.status, 413);
      const badToken = await tus(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1', 'upload-metadata': meta({ upload_token: 'f'.repeat(64) }) });
      assert.equal(badToken.status, 403);
    });

    test('expires_in_days metadata shortens the new bundle\'s expiry within the plan; out of range 400 at creation; appends ignore it', async () => {
      const DAY_MS = 86_400_000;
      const premium = await mintKey(srv, 'premium');
      /** Days from now to the expiry of the bundle a one-request upload with metadata `m` made (null: never). */
      const made = async (m: Record<string, string>, extra: Record<string, string> = {}): Promise<{ days: number | null; token: string; code: string }> => {
        const r = await tus(srv, 'POST', '/api/v1/tus/', {
          'upload-length': '2', 'upload-metadata': meta({ filename: 'e.txt', ...m }), 'content-type': 'application/offset+octet-stream', ...extra,
        }, Buffer.from('ok'));
        assert.equal(r.status, 201, r.text);
        const code = r.headers['sluice-short-code']!;
        const [row] = await srv.sql<{ expires_at: Date | null }[]>`select expires_at from bundles where short_code = ${code}`;
        const days = row!.expires_at === null ? null : Math.round((row!.expires_at.getTime() - Date.now()) / (DAY_MS / 100)) / 100;
        return { days, token: r.headers['sluice-upload-token']!, code };
      };
      assert.equal((await made({ expires_in_days: '1' })).days, 1);
      assert.equal((await made({})).days, 3);
      assert.equal((await made({ expires_in_days: '3650' }, { authorization: `Bearer ${premium}` })).days, 3650);
      assert.equal((await made({}, { authorization: `Bearer ${premium}` })).days, null);
      const refused = async (days: string, most: number, extra: Record<string, string> = {}): Promise<void> => {
        const r = await tus(srv, 'POST', '/api/v1/tus/', { 'upload-length': '2', 'upload-metadata': meta({ filename: 'e.txt', expires_in_days: days }), ...extra });
        assert.equal(r.status, 400, r.text);
        assert.deepEqual(JSON.parse(r.text), { success: false, error: `expires_in_days must be a whole number from 1 to ${most}`, code: 'INVALID_EXPIRY' });
      };
      const rowsBefore = (await srv.sql`select id from tus_uploads`).length;
      for (const days of ['4', '0', '1.5', 'x']) await refused(days, 3);
      await refused('3651', 3650, { authorization: `Bearer ${premium}` });
      assert.equal((await srv.sql`select id from tus_uploads`).length, rowsBefore, 'a refused creation keeps no session');
      // An append's metadata names no new bundle: the field is ignored, the bundle keeps its expiry.
      const first = await made({ expires_in_days: '2' });
      const loc = await create(srv, 1, { filename: 'f.txt', upload_token: first.token, expires_in_days: '999' });
      assert.equal((await patch(srv, loc, 0, Buffer.from('x'))).status, 204);
      const [after] = await srv.sql<{ expires_at: Date; file_count: number }[]>`select expires_at, file_count from bundles where short_code = ${first.code}`;
      assert.equal(after!.file_count, 2);
      assert.equal(Math.round((after!.expires_at.getTime() - Date.now()) / (DAY_MS / 100)) / 100, 2);
    });

    test('a password, upload token or notify_email in the metadata is used, never stored or echoed', async () => {
      const password = 'tus secret pw 7';
      const first = await tus(srv, 'POST', '/api/v1/tus/', {
        'upload-length': '5',
        'upload-metadata': meta({ filename: 'p.txt', access_password: password, notify_email: 'owner@example.com', description: 'locked' }),
        'content-type': 'application/offset+octet-stream',
      }, Buffer.from('hello'));
      assert.equal(first.status, 201, first.text);
      const loc = new URL(first.headers.location!).pathname;
      const token = first.headers['sluice-upload-token']!;
      const code = first.headers['sluice-short-code']!;
      // The bundle is locked by that password: its files are hidden until it is given.
      const info = await tus(srv, 'GET', `/api/v1/bundle/${code}`);
      assert.deepEqual(JSON.parse(info.text).files, []);
      // The write-only address went to the bundle it made.
      const [kept] = await srv.sql<{ notify_email: string }[]>`select notify_email from bundles where short_code = ${code}`;
      assert.equal(kept?.notify_email, 'owner@example.com');
      const second = await create(srv, 3, { filename: 'q.txt', upload_token: token, filetype: 'text/plain' });
      for (const [where, echoed] of [[loc, meta({ filename: 'p.txt', description: 'locked' })], [second, meta({ filename: 'q.txt', filetype: 'text/plain' })]]) {
        const h = await tus(srv, 'HEAD', where!);
        assert.equal(h.headers['upload-metadata'], echoed, 'HEAD echoes the other pairs, in order');
      }
      const rows = await srv.sql<{ metadata: string }[]>`select metadata from tus_uploads where id in (${path.basename(loc)}, ${path.basename(second)})`;
      assert.equal(rows.length, 2);
      for (const { metadata } of rows) {
        assert.doesNotMatch(metadata, /access_password|upload_token|notify_email/);
        assert.ok(!metadata.includes(Buffer.from(password).toString('base64')) && !metadata.includes(Buffer.from(token).toString('base64')));
      }
    });

    test('an expired unfinished upload is swept: row and part gone, HEAD 404', async () => {
      const loc = await create(srv, 1000);
      await patch(srv, loc, 0, randomBytes(400));
      assert.notEqual(await partOf(srv, loc), null);
      assert.equal((await tus(srv, 'HEAD', loc)).status, 200);
      await srv.sql`update tus_uploads set expires_at = now() - interval '1 minute' where id = ${path.basename(loc)}`;
      assert.equal((await tus(srv, 'HEAD', loc)).status, 404, 'expired sessions answer 404 before the sweep');
      const r = await srv.cli(['sweep']);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(await partOf(srv, loc), null);
      const rows = await srv.sql`select 1 from tus_uploads where id = ${path.basename(loc)}`;
      assert.equal(rows.length, 0);
      assert.equal((await tus(srv, 'HEAD', loc)).status, 404);
    });
  });
}
