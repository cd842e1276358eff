// tus 1.0.0, sentence by sentence: one row per server-side MUST and SHOULD of the core protocol and of
// each extension Sluice advertises (creation, creation-with-upload, creation-defer-length,
// termination, expiration, checksum, concatenation), each naming its sentence; then the bad input the
// protocol leaves to the server (always a 4xx with Tus-Resumable, never a 5xx, never a byte past the
// offset), and Sluice's own additions (GET of a finished upload, DELETE of one).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'undici';
import { backends, resumableBytes, resumableIds, startServer, type TestServer } from './helpers/server.ts';
import { OCTETS, tusCall, tusCreate, tusMeta, tusPatch, uploadPath, type TusRes } from './helpers/tus.ts';
import { assertNoServerErrors, MiB, rawConnect, write } from './upload-util.ts';
import { waitFor } from './helpers/wait.ts';

const CAP = 8 * MiB;
const IMF_FIXDATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const digest = (alg: string, b: Buffer): string => `${alg} ${createHash(alg).update(b).digest('base64')}`;

interface Row { readonly sentence: string; readonly check: (srv: TestServer) => Promise<void> }

/** A 4xx refusal as the protocol wants it: Tus-Resumable, the interface's JSON error shape. */
function assertRefused(r: TusRes, status: number): void {
  assert.equal(r.status, status, r.body);
  assert.equal(r.headers['tus-resumable'], '1.0.0', `Tus-Resumable on the ${status}`);
  if (r.body !== '') assert.equal(JSON.parse(r.body).success, false);
}

const offsetOf = async (srv: TestServer, loc: string): Promise<number> => Number((await tusCall(srv, 'HEAD', loc)).headers['upload-offset']);
/** The ids of every upload row and every stored part. */
const stored = async (srv: TestServer): Promise<string[]> => [
  ...(await srv.sql<{ id: string }[]>`select id from tus_uploads`).map((r) => `row ${r.id}`),
  ...(await resumableIds(srv)).map((id) => `part ${id}`),
];

/**
 * Runs `send` and checks that it left no upload row and no part behind. Only what is new counts: an
 * earlier check's terminated upload may still be losing its part (removed after the answer).
 */
async function storesNothing(srv: TestServer, send: () => Promise<void>): Promise<void> {
  const before = new Set(await stored(srv));
  await send();
  assert.deepEqual((await stored(srv)).filter((x) => !before.has(x)), [], 'nothing stored');
}

/** A finished upload of `data`; returns its path and the completing PATCH's answer. */
async function finished(srv: TestServer, data: Buffer, m: Record<string, string> = { filename: 'f.bin' }): Promise<{ loc: string; done: TusRes }> {
  const loc = await tusCreate(srv, data.length, { 'upload-metadata': tusMeta(m) });
  const done = await tusPatch(srv, loc, 0, data);
  assert.equal(done.status, 204, done.body);
  return { loc, done };
}

const CORE: Row[] = [
  { sentence: 'Upload-Offset: "The value MUST be a non-negative integer." (a request breaking it is refused)', async check(srv) {
    const loc = await tusCreate(srv, 10);
    for (const bad of ['-1', 'abc', '1.5', '', '0x1']) assertRefused(await tusPatch(srv, loc, 0, Buffer.from('x'), { 'upload-offset': bad }), 400);
    assert.equal(await offsetOf(srv, loc), 0);
  } },
  { sentence: 'Upload-Length: "The value MUST be a non-negative integer." (a request breaking it is refused)', async check(srv) {
    for (const bad of ['-5', 'abc', '1e3', ' ', '99999999999999999999']) {
      await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': bad }), 400));
    }
  } },
  { sentence: 'Tus-Version: "MUST be a comma-separated list of protocol versions supported by the Server … sorted by Server\'s preference"', async check(srv) {
    const r = await tusCall(srv, 'OPTIONS', '/api/v1/tus/');
    assert.match(r.headers['tus-version']!, /^1\.0\.0(,\d+\.\d+\.\d+)*$/);
  } },
  { sentence: 'Tus-Resumable: "MUST be included in every request and response except for OPTIONS requests"', async check(srv) {
    const loc = await tusCreate(srv, 4);
    const answers = [
      await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1' }),
      await tusCall(srv, 'HEAD', loc),
      await tusPatch(srv, loc, 0, Buffer.from('ab')),
      await tusPatch(srv, loc, 0, Buffer.from('ab')), // 409
      await tusCall(srv, 'PATCH', '/api/v1/tus/'), // 405
      await tusCall(srv, 'PUT', loc), // 405
      await tusCall(srv, 'HEAD', `/api/v1/tus/${'0'.repeat(32)}`), // 404
      await tusCall(srv, 'PATCH', `/api/v1/tus/not-an-id`, OCTETS, Buffer.from('x')), // 404
      await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': String(CAP + 1) }), // 413
      await tusCall(srv, 'DELETE', loc),
    ];
    for (const r of answers) assert.equal(r.headers['tus-resumable'], '1.0.0', `status ${r.status}`);
    const patchOnCollection = answers[4]!;
    assert.equal(patchOnCollection.status, 405);
    assert.equal(patchOnCollection.headers.allow, 'OPTIONS, POST');
  } },
  { sentence: 'Tus-Resumable: "If the version specified by the Client is not supported by the Server, it MUST respond with the 412 Precondition Failed status and MUST include the Tus-Version header"', async check(srv) {
    for (const v of ['0.2.2', '2.0.0', '']) {
      const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'tus-resumable': v, 'upload-length': '5' });
      assertRefused(r, 412);
      assert.equal(r.headers['tus-version'], '1.0.0');
    }
  } },
  { sentence: 'Tus-Resumable: "In addition, the Server MUST NOT process the request."', async check(srv) {
    await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'tus-resumable': '0.2.2', 'upload-length': '5' }), 412));
    const loc = await tusCreate(srv, 5);
    assertRefused(await tusPatch(srv, loc, 0, Buffer.from('hello'), { 'tus-resumable': '0.2.2' }), 412);
    assert.equal(await offsetOf(srv, loc), 0);
    assertRefused(await tusCall(srv, 'DELETE', loc, { 'tus-resumable': '0.2.2' }), 412);
    assert.equal((await tusCall(srv, 'HEAD', loc)).status, 200, 'not terminated');
  } },
  { sentence: 'Tus-Extension: "MUST be a comma-separated list of the extensions supported by the Server"', async check(srv) {
    const r = await tusCall(srv, 'OPTIONS', '/api/v1/tus/');
    assert.deepEqual(r.headers['tus-extension']!.split(',').sort(),
      ['checksum', 'concatenation', 'creation', 'creation-defer-length', 'creation-with-upload', 'expiration', 'termination']);
  } },
  { sentence: 'Tus-Max-Size: "MUST be a non-negative integer … The Server SHOULD set this header if there is a known hard limit."', async check(srv) {
    assert.match((await tusCall(srv, 'OPTIONS', '/api/v1/tus/')).headers['tus-max-size']!, /^\d+$/);
  } },
  { sentence: 'X-HTTP-Method-Override: "MUST be interpreted as the request\'s method by the Server, if the header is presented."', async check(srv) {
    const loc = await tusCreate(srv, 5);
    const p = await tusCall(srv, 'POST', loc, { ...OCTETS, 'x-http-method-override': 'PATCH', 'upload-offset': '0' }, Buffer.from('hel'));
    assert.equal(p.status, 204, p.body);
    assert.equal(p.headers['upload-offset'], '3');
    const h = await tusCall(srv, 'POST', loc, { 'x-http-method-override': 'HEAD' });
    assert.equal(h.headers['upload-offset'], '3');
    assert.equal((await tusCall(srv, 'POST', loc, { 'x-http-method-override': 'DELETE' })).status, 204);
    assert.equal((await tusCall(srv, 'HEAD', loc)).status, 404);
  } },
  { sentence: 'X-HTTP-Method-Override: "The actual method of the request MUST be ignored."', async check(srv) {
    await storesNothing(srv, async () => {
      const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'x-http-method-override': 'PATCH', 'upload-length': '5' });
      assertRefused(r, 405);
    });
    const loc = await tusCreate(srv, 5);
    assertRefused(await tusCall(srv, 'PATCH', loc, { ...OCTETS, 'x-http-method-override': 'PUT', 'upload-offset': '0' }, Buffer.from('x')), 405);
    assert.equal(await offsetOf(srv, loc), 0);
  } },
  { sentence: 'HEAD: "The Server MUST always include the Upload-Offset header … even if the offset is 0, or the upload is already considered completed."', async check(srv) {
    const loc = await tusCreate(srv, 3);
    assert.equal((await tusCall(srv, 'HEAD', loc)).headers['upload-offset'], '0');
    const { loc: done } = await finished(srv, Buffer.from('abc'));
    assert.equal((await tusCall(srv, 'HEAD', done)).headers['upload-offset'], '3');
  } },
  { sentence: 'HEAD: "If the size of the upload is known, the Server MUST include the Upload-Length header in the response."', async check(srv) {
    assert.equal((await tusCall(srv, 'HEAD', await tusCreate(srv, 77))).headers['upload-length'], '77');
  } },
  { sentence: 'HEAD: "If the resource is not found, the Server SHOULD return either the 404 Not Found, 410 Gone or 403 Forbidden status without the Upload-Offset header."', async check(srv) {
    for (const id of ['0'.repeat(32), 'nope']) {
      const r = await tusCall(srv, 'HEAD', `/api/v1/tus/${id}`);
      assertRefused(r, 404);
      assert.equal(r.headers['upload-offset'], undefined);
    }
  } },
  { sentence: 'HEAD: "The Server MUST prevent the client and/or proxies from caching the response by adding the Cache-Control: no-store header"', async check(srv) {
    assert.equal((await tusCall(srv, 'HEAD', await tusCreate(srv, 1))).headers['cache-control'], 'no-store');
  } },
  { sentence: 'PATCH: "The Server SHOULD accept PATCH requests against any upload URL and apply the bytes … at the given offset"', async check(srv) {
    const data = randomBytes(3000);
    const loc = await tusCreate(srv, data.length);
    for (const at of [0, 1000, 2000]) assert.equal((await tusPatch(srv, loc, at, data.subarray(at, at + 1000))).status, 204);
    const r = await request(`${srv.url}${loc}`);
    assert.ok(Buffer.from(await r.body.arrayBuffer()).equals(data), 'each piece landed at its offset');
  } },
  { sentence: 'PATCH: "All PATCH requests MUST use Content-Type: application/offset+octet-stream, otherwise the server SHOULD return a 415"', async check(srv) {
    const loc = await tusCreate(srv, 5);
    for (const type of ['application/octet-stream', 'text/plain', '']) {
      assertRefused(await tusPatch(srv, loc, 0, Buffer.from('hello'), { 'content-type': type }), 415);
    }
    assert.equal(await offsetOf(srv, loc), 0);
  } },
  { sentence: 'PATCH: "If the offsets do not match, the Server MUST respond with the 409 Conflict status without modifying the upload resource."', async check(srv) {
    const loc = await tusCreate(srv, 10);
    assert.equal((await tusPatch(srv, loc, 0, Buffer.from('abc'))).status, 204);
    for (const at of [0, 2, 4, 10, 11]) assertRefused(await tusPatch(srv, loc, at, Buffer.from('zz')), 409);
    assert.equal(await offsetOf(srv, loc), 3);
  } },
  { sentence: 'PATCH on a finished upload at its length: a body goes past the length (413, as docs/tus.md says); an empty one answers the offset', async check(srv) {
    const { loc } = await finished(srv, Buffer.from('done'));
    assertRefused(await tusPatch(srv, loc, 4, Buffer.from('more')), 413);
    const empty = await tusPatch(srv, loc, 4, Buffer.alloc(0));
    assert.equal(empty.status, 204);
    assert.equal(empty.headers['upload-offset'], '4');
  } },
  { sentence: 'PATCH: "The Server MUST acknowledge successful PATCH requests with the 204 No Content status. It MUST include the Upload-Offset header containing the new offset."', async check(srv) {
    const loc = await tusCreate(srv, 10);
    const r = await tusPatch(srv, loc, 0, Buffer.from('abcd'));
    assert.equal(r.status, 204);
    assert.equal(r.headers['upload-offset'], '4');
    assert.equal((await tusPatch(srv, loc, 4, Buffer.alloc(0))).headers['upload-offset'], '4', 'an empty PATCH moves nothing');
  } },
  { sentence: 'PATCH: "If the server receives a PATCH request against a non-existent resource it SHOULD return a 404 Not Found status."', async check(srv) {
    assertRefused(await tusPatch(srv, `/api/v1/tus/${'a'.repeat(32)}`, 0, Buffer.from('x')), 404);
  } },
  { sentence: 'PATCH: "The Server SHOULD always attempt to store as much of the received data as possible."', async check(srv) {
    // More than an S3 part (6 MiB) before the cut: an S3 append keeps less than a part in memory.
    const data = randomBytes(8 * MiB);
    const loc = await tusCreate(srv, data.length);
    const conn = await rawConnect(srv.port);
    await write(conn.sock, `PATCH ${loc} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n` +
      `Content-Type: application/offset+octet-stream\r\nContent-Length: ${data.length}\r\n\r\n`);
    await write(conn.sock, data.subarray(0, 7 * MiB));
    await waitFor('some of the bytes to be stored', async () => ((await resumableBytes(srv, path.basename(loc))) ?? 0) > 0);
    conn.sock.destroy();
    await waitFor('the cut PATCH to record what arrived', async () => (await offsetOf(srv, loc)) > 0);
  } },
  { sentence: 'OPTIONS: "A successful response indicated by the 204 No Content or 200 OK status MUST contain the Tus-Version header."', async check(srv) {
    for (const where of ['/api/v1/tus/', '/api/v1/tus', await tusCreate(srv, 1)]) {
      const r = await tusCall(srv, 'OPTIONS', where, { 'tus-resumable': '' });
      assert.ok(r.status === 204 || r.status === 200, `${where} ${r.status}`);
      assert.equal(r.headers['tus-version'], '1.0.0');
    }
  } },
  { sentence: 'OPTIONS: "The Client SHOULD NOT include the Tus-Resumable header in the request and the Server MUST ignore the header."', async check(srv) {
    assert.equal((await tusCall(srv, 'OPTIONS', '/api/v1/tus/', { 'tus-resumable': '0.0.1' })).status, 204);
  } },
];

const CREATION: Row[] = [
  { sentence: 'Creation: "If the Server supports this extension, it MUST add creation to the Tus-Extension header." (and each extension it offers)', async check(srv) {
    const ext = (await tusCall(srv, 'OPTIONS', '/api/v1/tus/')).headers['tus-extension']!.split(',');
    for (const e of ['creation', 'creation-with-upload', 'creation-defer-length', 'termination', 'expiration', 'checksum', 'concatenation']) assert.ok(ext.includes(e), e);
    assert.ok(!ext.includes('concatenation-unfinished'), 'only finished partials are joined');
  } },
  { sentence: 'Upload-Defer-Length: "Its value MUST be 1." / "If the Upload-Defer-Length header contains any other value than 1 the server should return a 400 Bad Request status."', async check(srv) {
    for (const v of ['0', '2', 'yes']) {
      await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-defer-length': v }), 400));
    }
    await storesNothing(srv, async () =>
      assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-defer-length': '1', 'upload-length': '5' }), 400));
    await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/'), 400));
  } },
  { sentence: 'POST: "As long as the length of the upload is not known, the Server MUST set Upload-Defer-Length: 1 in all responses to HEAD requests."', async check(srv) {
    const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-defer-length': '1' });
    const loc = uploadPath(r.headers.location!);
    assert.equal((await tusCall(srv, 'HEAD', loc)).headers['upload-defer-length'], '1');
    await tusPatch(srv, loc, 0, Buffer.from('ab'));
    const h = await tusCall(srv, 'HEAD', loc);
    assert.equal(h.headers['upload-defer-length'], '1');
    assert.equal(h.headers['upload-length'], undefined);
    assert.equal((await tusPatch(srv, loc, 2, Buffer.from('c'), { 'upload-length': '4' })).status, 204);
    const known = await tusCall(srv, 'HEAD', loc);
    assert.equal(known.headers['upload-defer-length'], undefined, '"If the length of an upload is not deferred, this header MUST be omitted."');
    assert.equal(known.headers['upload-length'], '4');
  } },
  { sentence: 'POST: "Once set the length MUST NOT be changed."', async check(srv) {
    const loc = await tusCreate(srv, 10);
    assertRefused(await tusPatch(srv, loc, 0, Buffer.from('a'), { 'upload-length': '11' }), 400);
    assert.equal(await offsetOf(srv, loc), 0);
  } },
  { sentence: 'Upload-Metadata: "The key MUST NOT contain spaces and commas and MUST NOT be empty … the value MUST be Base64 encoded. All keys MUST be unique." (malformed metadata is refused)', async check(srv) {
    const b64 = Buffer.from('x').toString('base64');
    for (const bad of [`a ${b64} extra`, `a ${b64},a ${b64}`, 'a not*base64', `a ${b64},,b`, 'a eA=,b eA==', ',', '', ' ']) {
      await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1', 'upload-metadata': bad }), 400));
    }
    const ok = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1', 'upload-metadata': `filename ${b64},is_confidential` });
    assert.equal(ok.status, 201, '"The value MAY be empty … the space … MAY be left out."');
  } },
  { sentence: 'POST: "If an upload contains additional metadata, responses to HEAD requests MUST include the Upload-Metadata header and its value as specified by the Client" (secrets excepted: see docs/tus.md)', async check(srv) {
    const m = tusMeta({ filename: 'x.txt', filetype: 'text/plain', note: 'ünï' });
    const loc = await tusCreate(srv, 1, { 'upload-metadata': m });
    assert.equal((await tusCall(srv, 'HEAD', loc)).headers['upload-metadata'], m);
  } },
  { sentence: 'POST: "If the length of the upload exceeds the maximum … the Server MUST respond with the 413 Request Entity Too Large status."', async check(srv) {
    await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': String(CAP + 1) }), 413));
  } },
  { sentence: 'POST: "The Server MUST acknowledge a successful upload creation with the 201 Created status. The Server MUST set the Location header"', async check(srv) {
    const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1' });
    assert.equal(r.status, 201);
    assert.match(uploadPath(r.headers.location!), /^\/api\/v1\/tus\/[0-9a-f]{32}$/);
  } },
  { sentence: 'Creation With Upload: "The Server … MUST include the Upload-Offset header in the response and MUST set its value to the offset of the upload after applying the accepted bytes."', async check(srv) {
    const r = await tusCall(srv, 'POST', '/api/v1/tus/', { ...OCTETS, 'upload-length': '100' }, Buffer.from('hello'));
    assert.equal(r.status, 201);
    assert.equal(r.headers['upload-offset'], '5');
    assert.equal(await offsetOf(srv, uploadPath(r.headers.location!)), 5);
  } },
];

const EXTENSIONS: Row[] = [
  { sentence: 'Expiration: "This header MUST be included in every PATCH response if the upload is going to expire."', async check(srv) {
    const loc = await tusCreate(srv, 4);
    for (const at of [0, 2]) assert.match((await tusPatch(srv, loc, at, Buffer.from('ab'))).headers['upload-expires']!, IMF_FIXDATE);
  } },
  { sentence: 'Expiration: "If the expiration is known at the creation, the Upload-Expires header MUST be included in the response to the initial POST request."', async check(srv) {
    const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1' });
    assert.ok(Date.parse(r.headers['upload-expires']!) > Date.now());
  } },
  { sentence: 'Expiration: "The value of the Upload-Expires header MUST be in RFC 7231 datetime format."', async check(srv) {
    assert.match((await tusCall(srv, 'HEAD', await tusCreate(srv, 1))).headers['upload-expires']!, IMF_FIXDATE);
  } },
  { sentence: 'Expiration: "If a Client does attempt to resume an upload which has since been removed by the Server, the Server SHOULD respond with the 404 Not Found or 410 Gone status."', async check(srv) {
    const loc = await tusCreate(srv, 4);
    await srv.sql`update tus_uploads set expires_at = now() - interval '1 second' where id = ${path.basename(loc)}`;
    assertRefused(await tusCall(srv, 'HEAD', loc), 404);
    assertRefused(await tusPatch(srv, loc, 0, Buffer.from('ab')), 404);
  } },
  { sentence: 'Checksum: "the Server MUST verify the uploaded chunk … 400 Bad Request if the checksum algorithm is not supported … 460 Checksum Mismatch … 204 … In the first two cases the uploaded chunk MUST be discarded, and the upload and its offset MUST NOT be updated."', async check(srv) {
    const loc = await tusCreate(srv, 10);
    const body = Buffer.from('hello');
    assertRefused(await tusPatch(srv, loc, 0, body, { 'upload-checksum': `crc32 ${Buffer.from('abcd').toString('base64')}` }), 400);
    assertRefused(await tusPatch(srv, loc, 0, body, { 'upload-checksum': digest('sha256', Buffer.from('other')) }), 460);
    assert.equal(await offsetOf(srv, loc), 0);
    const ok = await tusPatch(srv, loc, 0, body, { 'upload-checksum': digest('md5', body) });
    assert.equal(ok.status, 204);
    assert.equal(ok.headers['upload-offset'], '5');
  } },
  { sentence: 'Checksum: "The Server MUST support at least the SHA1 checksum algorithm identified by sha1."', async check(srv) {
    const loc = await tusCreate(srv, 3);
    assert.equal((await tusPatch(srv, loc, 0, Buffer.from('abc'), { 'upload-checksum': digest('sha1', Buffer.from('abc')) })).status, 204);
  } },
  { sentence: 'Checksum: "The Tus-Checksum-Algorithm header MUST be included in the response to an OPTIONS request." (names lowercase ASCII)', async check(srv) {
    const algs = (await tusCall(srv, 'OPTIONS', '/api/v1/tus/')).headers['tus-checksum-algorithm']!;
    assert.match(algs, /^[a-z0-9-]+(,[a-z0-9-]+)*$/);
    assert.ok(algs.split(',').includes('sha1'));
  } },
  { sentence: 'Termination: "When receiving a DELETE request for an existing upload the Server SHOULD free associated resources and MUST respond with the 204 No Content status"', async check(srv) {
    const loc = await tusCreate(srv, 10);
    await tusPatch(srv, loc, 0, Buffer.from('abc'));
    assert.notEqual(await resumableBytes(srv, path.basename(loc)), null);
    assert.equal((await tusCall(srv, 'DELETE', loc)).status, 204);
    // The answer comes once the upload's row is gone; its part goes right after.
    await waitFor('the part is freed', async () => (await resumableBytes(srv, path.basename(loc))) === null);
  } },
  { sentence: 'Termination: "For all future requests to this URL, the Server SHOULD respond with the 404 Not Found or 410 Gone status."', async check(srv) {
    const loc = await tusCreate(srv, 10);
    assert.equal((await tusCall(srv, 'DELETE', loc)).status, 204);
    assertRefused(await tusCall(srv, 'HEAD', loc), 404);
    assertRefused(await tusPatch(srv, loc, 0, Buffer.from('a')), 404);
    assertRefused(await tusCall(srv, 'DELETE', loc), 404);
  } },
  { sentence: 'Termination: "a way for the Client to terminate completed and unfinished uploads" — a finished upload\'s file is deleted with it', async check(srv) {
    const { loc, done } = await finished(srv, Buffer.from('finished bytes'));
    const id = done.headers['sluice-file-id']!;
    assert.equal((await request(`${srv.url}/api/v1/download/${id}`)).statusCode, 200);
    assert.equal((await tusCall(srv, 'DELETE', loc)).status, 204);
    const gone = await request(`${srv.url}/api/v1/download/${id}`);
    await gone.body.dump();
    assert.equal(gone.statusCode, 404, 'the file it became is gone');
    const [b] = await srv.sql<{ n: number; total: string }[]>`
      select file_count as n, total_size_bytes::text as total from bundles where short_code = ${done.headers['sluice-short-code']!}`;
    assert.deepEqual(b, { n: 0, total: '0' });
    assertRefused(await tusCall(srv, 'GET', loc), 404);
  } },
];

/** A finished partial upload of `data`; returns its path. */
async function partial(srv: TestServer, data: Buffer, extra: Record<string, string> = {}): Promise<string> {
  const r = await tusCall(srv, 'POST', '/api/v1/tus/', { ...OCTETS, 'upload-concat': 'partial', 'upload-length': String(data.length), ...extra }, data);
  assert.equal(r.status, 201, r.body);
  assert.equal(r.headers['sluice-file-id'], undefined, 'a finished partial is no file');
  return uploadPath(r.headers.location!);
}
const counts = async (srv: TestServer): Promise<number[]> =>
  Object.values((await srv.sql<Array<Record<string, number>>>`
    select (select count(*)::int from bundles) as b, (select count(*)::int from files) as f`)[0]!);

const CONCATENATION: Row[] = [
  { sentence: 'Concatenation: "Multiple partial uploads are concatenated into a final upload in the specified order." (the protocol\'s hello + world)', async check(srv) {
    const a = await partial(srv, Buffer.from('hello'));
    const b = await partial(srv, Buffer.from(' world'));
    const f = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a} ${b}`, 'upload-metadata': tusMeta({ filename: 'hw.txt' }) });
    assert.equal(f.status, 201, f.body);
    const r = await request(`${srv.url}${uploadPath(f.headers.location!)}`);
    assert.equal(await r.body.text(), 'hello world');
    assert.equal(f.headers['upload-offset'], '11');
    assert.match(f.headers['sluice-short-code']!, /^[A-Za-z0-9]{5}$/, 'committed like any other upload');
  } },
  { sentence: 'Concatenation: "The partial uploads MUST be concatenated as per the order specified in the list."', async check(srv) {
    const a = await partial(srv, Buffer.from('hello'));
    const b = await partial(srv, Buffer.from(' world'));
    const f = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${srv.url}${b} ${a}` });
    assert.equal(f.status, 201, f.body);
    assert.equal(await (await request(`${srv.url}${uploadPath(f.headers.location!)}`)).body.text(), ' worldhello', 'absolute URLs too');
  } },
  { sentence: 'Concatenation: "The length of the final upload MUST be the sum of the length of all partial uploads." / "After successful concatenation, the Upload-Offset and Upload-Length MUST be set and their values MUST be equal."', async check(srv) {
    const parts = [randomBytes(1000), randomBytes(0), randomBytes(MiB + 7)];
    const locs = [];
    for (const p of parts) locs.push(await partial(srv, p));
    const f = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${locs.join(' ')}` });
    const h = await tusCall(srv, 'HEAD', uploadPath(f.headers.location!));
    assert.equal(h.headers['upload-length'], String(1000 + MiB + 7));
    assert.equal(h.headers['upload-offset'], h.headers['upload-length']);
  } },
  { sentence: 'Concatenation: "Response to HEAD request against partial or final upload MUST include the Upload-Concat header and its value as received in the upload creation request." / "The response to a HEAD request for a partial upload MUST contain the Upload-Offset header."', async check(srv) {
    const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': 'partial', 'upload-length': '4' });
    const a = uploadPath(r.headers.location!);
    const ha = await tusCall(srv, 'HEAD', a);
    assert.equal(ha.headers['upload-concat'], 'partial');
    assert.equal(ha.headers['upload-offset'], '0');
    assert.equal((await tusPatch(srv, a, 0, Buffer.from('abcd'))).status, 204);
    const value = `final;${a}`;
    const f = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': value });
    assert.equal((await tusCall(srv, 'HEAD', uploadPath(f.headers.location!))).headers['upload-concat'], value);
  } },
  { sentence: 'Concatenation: "The Server SHOULD NOT process these partial uploads until they are concatenated to form a final upload." (a finished partial is no file, no bundle)', async check(srv) {
    const before = await counts(srv);
    const a = await partial(srv, randomBytes(2000));
    assert.deepEqual(await counts(srv), before);
    assertRefused(await tusCall(srv, 'GET', a), 404);
    assert.equal((await tusCall(srv, 'DELETE', a)).status, 204, 'a partial terminates like any unfinished upload');
  } },
  { sentence: 'Concatenation: "The Client MUST NOT include the Upload-Length header in the final upload creation." (refused, nothing stored)', async check(srv) {
    const a = await partial(srv, Buffer.from('abc'));
    await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a}`, 'upload-length': '3' }), 400));
    assert.equal((await tusCall(srv, 'HEAD', a)).status, 200, 'the partial is still there');
  } },
  { sentence: 'Concatenation: "This concatenation request SHOULD happen after all of the corresponding partial uploads are completed." (concatenation-unfinished is not offered: 400)', async check(srv) {
    const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': 'partial', 'upload-length': '10' });
    const a = uploadPath(r.headers.location!);
    await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a}` }), 400));
    for (const bad of ['final;', 'final;/api/v1/tus/zz', `final;/elsewhere/${'a'.repeat(32)}`, 'middle', `final;${a} ${a}`, `final;/api/v1/tus/${'b'.repeat(32)}`]) {
      await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': bad }), 400));
    }
    const notPartial = await tusCreate(srv, 3);
    await tusPatch(srv, notPartial, 0, Buffer.from('abc'));
    assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${notPartial}` }), 400);
  } },
  { sentence: 'Concatenation: "The Server MUST respond with the 403 Forbidden status to PATCH requests against a final upload URL and MUST NOT modify the final or its partial uploads."', async check(srv) {
    const a = await partial(srv, Buffer.from('abc'));
    const f = uploadPath((await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a}` })).headers.location!);
    assertRefused(await tusPatch(srv, f, 3, Buffer.from('d')), 403);
    assert.equal(await offsetOf(srv, f), 3);
  } },
  { sentence: 'Concatenation: "the partial uploads\' metadata SHALL NOT be transferred to the new final upload"', async check(srv) {
    const a = await partial(srv, Buffer.from('abc'), { 'upload-metadata': tusMeta({ filename: 'piece.bin' }) });
    const f = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a}`, 'upload-metadata': tusMeta({ filename: 'whole.txt' }) });
    const [row] = await srv.sql<{ name: string }[]>`select name from files where id = ${Number(f.headers['sluice-file-id'])}`;
    assert.equal(row!.name, 'whole.txt');
  } },
  { sentence: 'Sluice: each partial counts against the cap once: partials that fit alone but not together make no final (413), nothing stored, the partials kept', async check(srv) {
    const a = await partial(srv, randomBytes(5 * MiB));
    const b = await partial(srv, randomBytes(4 * MiB));
    await storesNothing(srv, async () => assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a} ${b}` }), 413));
    assert.equal(await offsetOf(srv, a), 5 * MiB);
  } },
  { sentence: 'Sluice: a final upload with upload_token joins its bundle within the bundle\'s room; the partials are then gone', async check(srv) {
    const first = await tusCall(srv, 'POST', '/api/v1/tus/', { ...OCTETS, 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 'x' }) }, Buffer.from('abc'));
    const token = first.headers['sluice-upload-token']!;
    const a = await partial(srv, randomBytes(MiB));
    const b = await partial(srv, randomBytes(MiB));
    const f = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a} ${b}`, 'upload-metadata': tusMeta({ filename: 'y', upload_token: token }) });
    assert.equal(f.status, 201, f.body);
    assert.equal(f.headers['sluice-short-code'], first.headers['sluice-short-code']);
    for (const p of [a, b]) {
      assert.equal(await resumableBytes(srv, path.basename(p)), null, 'the partial\'s part is gone');
      assertRefused(await tusCall(srv, 'GET', p), 404);
    }
    assertRefused(await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${a}` }), 400);
    assert.equal((await tusCall(srv, 'DELETE', a)).status, 204, 'a spent partial still terminates');
    const [bundle] = await srv.sql<{ total: string }[]>`select total_size_bytes::text as total from bundles where short_code = ${f.headers['sluice-short-code']!}`;
    assert.equal(bundle!.total, String(3 + 2 * MiB));
  } },
];

const BAD_INPUT: Row[] = [
  { sentence: 'bad input: a PATCH whose Content-Length goes past Upload-Length is refused (413) before any byte is stored', async check(srv) {
    const loc = await tusCreate(srv, 4);
    assertRefused(await tusPatch(srv, loc, 0, Buffer.from('abcdef')), 413);
    assert.equal(await offsetOf(srv, loc), 0);
  } },
  { sentence: 'bad input: a chunked PATCH body longer than the upload stores no byte past its length', async check(srv) {
    const loc = await tusCreate(srv, 4);
    const r = await request(`${srv.url}${loc}`, {
      method: 'PATCH',
      headers: { 'tus-resumable': '1.0.0', ...OCTETS, 'upload-offset': '0' },
      body: Readable.from([Buffer.from('ab'), Buffer.from('cdefgh')]),
    }).catch(() => null);
    if (r) {
      assert.ok(r.statusCode === 413 || r.statusCode === 204, String(r.statusCode));
      await r.body.dump();
    }
    const offset = await offsetOf(srv, loc);
    assert.ok(offset <= 4, `offset ${offset}`);
    assert.equal((await tusCall(srv, 'HEAD', loc)).headers['upload-length'], '4');
  } },
  { sentence: 'bad input: Upload-Offset past the length is a 409 (it is not the offset), nothing stored', async check(srv) {
    const loc = await tusCreate(srv, 4);
    assertRefused(await tusPatch(srv, loc, 9, Buffer.from('ab')), 409);
    assert.equal(await offsetOf(srv, loc), 0);
  } },
  { sentence: 'bad input: Upload-Checksum malformed is a 400', async check(srv) {
    const loc = await tusCreate(srv, 4);
    assertRefused(await tusPatch(srv, loc, 0, Buffer.from('ab'), { 'upload-checksum': 'sha1' }), 400);
  } },
];

const SLUICE: Row[] = [
  { sentence: 'Sluice: GET on a finished upload\'s URL serves its bytes (as tusd does), with Range; an unfinished one is 404', async check(srv) {
    const data = randomBytes(100_000);
    const { loc } = await finished(srv, data);
    const r = await request(`${srv.url}${loc}`);
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers['tus-resumable'], '1.0.0');
    assert.ok(Buffer.from(await r.body.arrayBuffer()).equals(data));
    const part = await request(`${srv.url}${loc}`, { headers: { range: 'bytes=10-19' } });
    assert.equal(part.statusCode, 206);
    assert.ok(Buffer.from(await part.body.arrayBuffer()).equals(data.subarray(10, 20)));
    assertRefused(await tusCall(srv, 'GET', await tusCreate(srv, 5)), 404);
  } },
  { sentence: 'Sluice: GET on a finished upload of a password-protected bundle is hidden (404) until an access token is shown', async check(srv) {
    const { loc, done } = await finished(srv, Buffer.from('secret bytes'), { filename: 's.txt', access_password: 'pw pw pw 1' });
    assertRefused(await tusCall(srv, 'GET', loc), 404);
    const v = await request(`${srv.url}/api/verify-access`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ short_code: done.headers['sluice-short-code'], password: 'pw pw pw 1' }),
    });
    const { access_token: token } = (await v.body.json()) as { access_token: string };
    const r = await request(`${srv.url}${loc}`, { headers: { 'x-access-token': token } });
    assert.equal(r.statusCode, 200);
    assert.equal(await r.body.text(), 'secret bytes');
  } },
  { sentence: 'Sluice: HEAD of a finished upload tells its creator what the completion told; so does HEAD after a crash left its row unmarked', async check(srv) {
    const { loc, done } = await finished(srv, Buffer.from('kept'));
    const told = ['sluice-short-code', 'sluice-share-url', 'sluice-file-id', 'sluice-upload-token'];
    const first = Object.fromEntries(told.map((h) => [h, done.headers[h]]));
    assert.match(first['sluice-upload-token']!, /^[0-9a-f]{64}$/);
    const head = await tusCall(srv, 'HEAD', loc);
    assert.deepEqual(Object.fromEntries(told.map((h) => [h, head.headers[h]])), first);
    // The state a crash between the bundle's commit and the row's leaves: the row at its full offset, unmarked.
    const id = uploadPath(loc).split('/').pop()!;
    await srv.sql`update tus_uploads set completed_at = null, file_id = null, bundle_id = null where id = ${id}`;
    const again = await tusCall(srv, 'HEAD', loc);
    assert.deepEqual(Object.fromEntries(told.map((h) => [h, again.headers[h]])), first);
    const [row] = await srv.sql<{ completed: boolean }[]>`select completed_at is not null as completed from tus_uploads where id = ${id}`;
    assert.equal(row!.completed, true, 'and the row is marked again');
    // An empty PATCH at the end (a client retrying the completion) is told the same.
    await srv.sql`update tus_uploads set completed_at = null, file_id = null, bundle_id = null where id = ${id}`;
    const retried = await tusPatch(srv, loc, 4, Buffer.alloc(0));
    assert.equal(retried.status, 204, retried.body);
    assert.deepEqual(Object.fromEntries(told.map((h) => [h, retried.headers[h]])), first);
  } },
];

for (const backend of backends()) {
  describe(`tus 1.0.0, sentence by sentence (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { ANON_MAX_BUNDLE_BYTES: String(CAP), SWEEP_INTERVAL_SECONDS: '86400' });
    });
    after(() => srv?.close());
    for (const row of [...CORE, ...CREATION, ...EXTENSIONS, ...CONCATENATION, ...BAD_INPUT, ...SLUICE]) test(row.sentence, () => row.check(srv));
    test('no answer above was a 5xx, nor logged as an error', () => assertNoServerErrors(srv));
  });
}
