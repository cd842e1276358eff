/**
 * The multipart shortcuts that read busboy's and streamsearch's private state: on only for the versions
 * they were written against, visible in /readyz and /metrics (a silent fallback fails here), and safe
 * for text fields whatever the chunk pool decides.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import busboy from 'busboy';
import pino from 'pino';
import { request } from 'undici';
import { KNOWN_VERSIONS, busboyInner, enableFastPaths, fastPathsFor } from '../src/ingest/fast-paths.ts';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { multipart, type Part, filePart } from './helpers/multipart.ts';
import { MiB, sha, type Reply } from './upload-util.ts';

const UNKNOWN = { ...KNOWN_VERSIONS, busboy: '99.0.0' };
const KNOWN_PATHS = { multipartSearch: true, straightToFile: true };

describe('fast paths: version checks', () => {
  test('on for the known versions only', () => {
    assert.deepEqual(fastPathsFor(KNOWN_VERSIONS), KNOWN_PATHS);
    assert.deepEqual(fastPathsFor(UNKNOWN), { multipartSearch: true, straightToFile: false });
    assert.deepEqual(fastPathsFor({ ...KNOWN_VERSIONS, streamsearch: '1.2.0' }), { multipartSearch: false, straightToFile: false });
  });

  test('an unknown version turns them off and says so once in the log', () => {
    const lines: string[] = [];
    const log = pino({ level: 'info' }, new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }));
    const paths = enableFastPaths(log, { busboy: '2.0.0', streamsearch: '2.0.0' });
    assert.deepEqual(paths, { multipartSearch: false, straightToFile: false });
    assert.equal(lines.length, 1);
    assert.match(lines[0]!, /"level":40.*fast paths off/);
    assert.equal(busboyInner(busboy({ headers: { 'content-type': 'multipart/form-data; boundary=x' } }), paths), null);
  });
});

/** Text fields between large file parts, parsed with every chunk overwritten as soon as busboy returns. */
async function parseReusingChunks(withInner: boolean, body: Buffer, boundary: string): Promise<Record<string, string>> {
  const bb = busboy({ headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } });
  const inner = withInner ? busboyInner(bb, KNOWN_PATHS) : null;
  if (withInner) assert.ok(inner, "busboy's internals are where fast-paths.ts expects them");
  const fields: Record<string, string> = {};
  bb.on('field', (name, value) => (fields[name] = value));
  bb.on('file', (_name, stream) => {
    inner?.fileStarted();
    stream.resume();
  });
  const done = new Promise<Record<string, string>>((resolve, reject) => bb.on('close', () => resolve(fields)).on('error', reject));
  // One scratch buffer for every chunk: the worst a misjudged unreferenced() could do to the pool.
  const scratch = Buffer.alloc(512);
  for (let at = 0, n = 1; at < body.length; at += n, n = 1 + ((n * 7919) % 509)) {
    const chunk = scratch.subarray(0, Math.min(n, body.length - at));
    body.copy(chunk, 0, at);
    // A write busboy queued is not parsed yet: the chunk is reused once it was (multipart.ts's
    // unreferenced() asks the same). Node 24 queues writes while a file stream is not flowing yet.
    bb.write(chunk);
    while (bb.writableLength > 0) await new Promise((r) => setImmediate(r));
    chunk.fill(0x58); // 'X'
  }
  bb.end();
  return done;
}

describe('fast paths: text fields never share a reused chunk', () => {
  const boundary = 'b0undary';
  const texts = { description: 'd'.repeat(300) + randomBytes(300).toString('hex'), access_password: randomBytes(40).toString('hex') };
  const { body } = multipart(
    [
      { name: 'description', value: texts.description },
      filePart('one.bin', randomBytes(300_000)),
      { name: 'access_password', value: texts.access_password },
      filePart('two.bin', randomBytes(200_000)),
    ],
    boundary,
  );

  test('with busboyInner, every field value is intact', async () => {
    assert.deepEqual(await parseReusingChunks(true, body, boundary), texts);
  });

  test('without it the same reuse corrupts them (the hazard is real)', async () => {
    assert.notDeepEqual(await parseReusingChunks(false, body, boundary), texts);
  });
});

async function metric(srv: TestServer, name: string): Promise<number> {
  const text = await (await request(`${srv.url}/metrics`)).body.text();
  return Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
}

/** Sends a body in uneven pieces, so part boundaries and text fields fall across the server's chunks. */
async function uploadInPieces(srv: TestServer, parts: Part[]): Promise<Reply> {
  const { body, contentType } = multipart(parts);
  async function* pieces(): AsyncGenerator<Buffer> {
    for (let at = 0, n = 1; at < body.length; at += n, n = 1 + ((n * 104729) % (700 * 1024))) yield body.subarray(at, at + n);
  }
  const res = await request(`${srv.url}/api/v1/upload`, {
    method: 'POST',
    body: Readable.from(pieces()),
    headers: { 'content-type': contentType, 'content-length': String(body.length) },
  });
  const json = (await res.body.json()) as Reply;
  assert.equal(res.statusCode, 201, JSON.stringify(json));
  return json;
}

/** Large files with text fields around them; every byte and every field value comes back. */
async function assertLargeUploadIntact(srv: TestServer): Promise<number> {
  const big = [randomBytes(12 * MiB + 17), randomBytes(9 * MiB)];
  const description = `fields around large parts ${randomBytes(200).toString('base64')}`;
  const password = randomBytes(24).toString('hex');
  const before = await metric(srv, 'sluice_multipart_straight_bytes_total');
  const reply = await uploadInPieces(srv, [
    filePart('first.bin', big[0]!),
    { name: 'description', value: description },
    filePart('second.bin', big[1]!),
    { name: 'access_password', value: password },
    filePart('tail.txt', 'tail'),
  ]);
  const [row] = await srv.sql<{ description: string }[]>`select description from bundles where short_code = ${reply.short_code}`;
  assert.equal(row?.description, description);
  const verified = await request(`${srv.url}/api/verify-access`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ short_code: reply.short_code, password }),
  });
  const { access_token: token } = (await verified.body.json()) as { access_token: string };
  assert.equal(verified.statusCode, 200);
  for (const [i, data] of big.entries()) {
    const got = await request(`${srv.url}${reply.files[i]!.download_url}`, { headers: { 'x-access-token': token } });
    assert.equal(got.statusCode, 200);
    assert.equal(sha(Buffer.from(await got.body.arrayBuffer())), sha(data));
  }
  const wrong = (await request(`${srv.url}/api/verify-access`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ short_code: reply.short_code, password: `${password}x` }),
  })).statusCode;
  assert.equal(wrong, 403, 'a wrong password is still refused');
  return (await metric(srv, 'sluice_multipart_straight_bytes_total')) - before;
}

for (const backend of backends()) {
  describe(`fast paths in the server (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(() => srv?.close());

    test('/readyz reports them on', async () => {
      const ready = (await (await request(`${srv.url}/readyz`)).body.json()) as { fast_paths: unknown };
      assert.deepEqual(ready.fast_paths, { multipart_search: true, straight_to_file: true });
    });

    test('a large upload goes mostly straight to file, fields and bytes intact', async () => {
      const straight = await assertLargeUploadIntact(srv);
      assert.ok(straight > 10 * MiB, `bytes written straight to file: ${straight}`);
    });
  });
}

describe('fast paths with an unknown busboy version', () => {
  let srv: TestServer;
  before(async () => {
    const preload = path.join(import.meta.dirname, 'helpers/unknown-busboy.cjs');
    srv = await startServer(backends()[0]!, { NODE_OPTIONS: `--require ${preload}` });
  });
  after(() => srv?.close());

  test('/readyz reports the straight path off', async () => {
    const ready = (await (await request(`${srv.url}/readyz`)).body.json()) as { fast_paths: unknown };
    assert.deepEqual(ready.fast_paths, { multipart_search: true, straight_to_file: false });
  });

  test('uploads still arrive whole through the plain path', async () => {
    assert.equal(await assertLargeUploadIntact(srv), 0);
  });
});
