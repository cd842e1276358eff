// The behaviours tus-js-client's own end-to-end specs check against a tus server, here against Sluice:
// an upload (whole, with creation-with-upload, and a 50 MiB Node stream in 20 MiB pieces) read back
// with GET <upload URL>, its metadata echoed by HEAD, then `abort(true)` (termination) after which
// GET answers 404; and parallelUploads (concatenation), which makes one file and leaves no partial.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { Upload, type UploadOptions } from 'tus-js-client';
import { backends, resumableIds, startServer, type TestServer } from './helpers/server.ts';
import { assertNoServerErrors, MiB } from './upload-util.ts';

const PATTERN = 'abcdefghij';
/** `size` bytes of the repeating pattern, streamed 1 MiB at a time. */
function patternStream(size: number): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= size) return void this.push(null);
      const n = Math.min(MiB, size - sent);
      const shift = sent % PATTERN.length;
      const unit = PATTERN.slice(shift) + PATTERN.slice(0, shift);
      this.push(Buffer.from(unit.repeat(Math.ceil(n / unit.length)).slice(0, n)));
      sent += n;
    },
  });
}

const META = { nonlatin: 'słońce', number: '100', filename: 'hello.txt', filetype: 'text/plain' };
const META_PAIRS = ['filename aGVsbG8udHh0', 'filetype dGV4dC9wbGFpbg==', 'nonlatin c8WCb8WEY2U=', 'number MTAw'];

function run(source: Buffer | Readable, options: Partial<UploadOptions>): Promise<Upload> {
  return new Promise((resolve, reject) => {
    const upload: Upload = new Upload(source, {
      metadata: META,
      ...options,
      onSuccess: () => resolve(upload),
      onError: reject,
    });
    upload.start();
  });
}

async function readBack(upload: Upload, expected: { text?: string; size: number }): Promise<void> {
  const res = await fetch(upload.url!);
  assert.equal(res.status, 200);
  const body = await res.text();
  assert.equal(body.length, expected.size);
  if (expected.text !== undefined) assert.equal(body, expected.text);
  const head = await fetch(upload.url!, { method: 'HEAD', headers: { 'Tus-Resumable': '1.0.0' } });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('tus-resumable'), '1.0.0');
  assert.equal(head.headers.get('upload-offset'), String(expected.size));
  assert.equal(head.headers.get('upload-length'), String(expected.size));
  assert.deepEqual(head.headers.get('upload-metadata')!.split(',').sort(), META_PAIRS);
  assert.equal(await head.text(), '');
}

async function terminated(upload: Upload): Promise<void> {
  await upload.abort(true);
  assert.equal((await fetch(upload.url!)).status, 404);
}

for (const backend of backends()) {
  describe(`tus-js-client end-to-end specs (${backend})`, () => {
    let srv: TestServer;
    let endpoint: string;
    before(async () => {
      srv = await startServer(backend);
      endpoint = `${srv.url}/api/v1/tus/`;
    });
    after(() => srv?.close());

    test('a small upload reads back with GET, then terminates to 404', async () => {
      const upload = await run(Buffer.from('hello world'), { endpoint });
      await readBack(upload, { text: 'hello world', size: 11 });
      await terminated(upload);
    });

    test('creation-with-upload reads back the same', async () => {
      const upload = await run(Buffer.from('hello world'), { endpoint, uploadDataDuringCreation: true });
      await readBack(upload, { text: 'hello world', size: 11 });
    });

    test('a 50 MiB Node stream in 20 MiB pieces reads back byte for byte, then terminates to 404', async () => {
      const size = 50 * MiB;
      const upload = await run(patternStream(size), { endpoint, chunkSize: 20 * MiB, uploadSize: size });
      const res = await fetch(upload.url!);
      assert.equal(res.status, 200);
      let at = 0;
      for await (const chunk of Readable.fromWeb(res.body! as never) as AsyncIterable<Buffer>) {
        const shift = at % PATTERN.length;
        const unit = PATTERN.slice(shift) + PATTERN.slice(0, shift);
        assert.equal(chunk.toString('latin1'), unit.repeat(Math.ceil(chunk.length / unit.length)).slice(0, chunk.length));
        at += chunk.length;
      }
      assert.equal(at, size);
      await terminated(upload);
      assertNoServerErrors(srv);
    });

    for (const duringCreation of [false, true]) test(`parallelUploads: 2${duringCreation ? ' with uploadDataDuringCreation' : ''} makes one file of one bundle and leaves no partial behind`, async () => {
      const count = async (): Promise<number[]> => {
        const [r] = await srv.sql<{ b: number; f: number; t: number }[]>`
          select (select count(*)::int from bundles) as b, (select count(*)::int from files) as f,
                 (select count(*)::int from tus_uploads where completed_at is null) as t`;
        return [r!.b, r!.f, r!.t, (await resumableIds(srv)).length];
      };
      const before = await count();
      const data = Buffer.from(PATTERN.repeat(420_000));
      const upload = await run(data, { endpoint, parallelUploads: 2, uploadDataDuringCreation: duringCreation });
      await readBack(upload, { text: data.toString(), size: data.length });
      const [b, f, t, parts] = await count();
      assert.deepEqual([b, f, t, parts], [before[0]! + 1, before[1]! + 1, before[2], before[3]], 'one bundle, one file, no partial row or part');
      await terminated(upload);
      assertNoServerErrors(srv);
    });
  });
}
