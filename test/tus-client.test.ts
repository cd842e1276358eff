// tus-js-client (the reference tus client) against the real server: chunked uploads into one bundle,
// an interrupted upload resumed by a new Upload, and a connection cut mid-PATCH retried automatically.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'undici';
import { Upload, type HttpResponse, type PreviousUpload, type UploadOptions } from 'tus-js-client';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { relay, type Relay } from './helpers/relay.ts';
import { assertNoServerErrors, ensureRunning, MiB } from './upload-util.ts';

interface Done { shortCode: string; fileId: number; uploadToken: string | undefined }
interface BundleFile { id: number; name: string; size: number; mime_type: string }

const header = (res: HttpResponse, name: string): string | undefined => res.getHeader(name) ?? undefined;

/** A file of `size` random bytes under `dir`, written 1 MiB at a time; returns its path and SHA-256. */
function makeFile(dir: string, name: string, size: number): { file: string; sha: string; size: number } {
  const file = path.join(dir, name);
  const h = createHash('sha256');
  const fd = fs.openSync(file, 'w');
  for (let left = size; left > 0; left -= MiB) {
    const piece = randomBytes(Math.min(MiB, left));
    h.update(piece);
    fs.writeSync(fd, piece);
  }
  fs.closeSync(fd);
  return { file, sha: h.digest('hex'), size };
}

/** Runs one tus-js-client Upload of `file` to the end (after `prepare`); rejects on its onError. */
function runUpload(file: string, options: UploadOptions, prepare?: (u: Upload) => Promise<void>): Promise<Done> {
  return new Promise((resolve, reject) => {
    const upload = new Upload(fs.createReadStream(file), {
      retryDelays: null,
      ...options,
      onError: reject,
      onSuccess: ({ lastResponse }) => {
        resolve({
          shortCode: header(lastResponse, 'Sluice-Short-Code') ?? '',
          fileId: Number(header(lastResponse, 'Sluice-File-Id')),
          uploadToken: header(lastResponse, 'Sluice-Upload-Token'),
        });
      },
    });
    (prepare ? prepare(upload) : Promise.resolve()).then(() => upload.start(), reject);
  });
}

/** A url storage in memory, as a browser's localStorage would keep it. */
function memoryUrlStorage(): NonNullable<UploadOptions['urlStorage']> {
  const saved = new Map<string, PreviousUpload & { fingerprint: string }>();
  let seq = 0;
  return {
    findAllUploads: async () => [...saved.values()],
    findUploadsByFingerprint: async (fp) => [...saved.values()].filter((u) => u.fingerprint === fp),
    removeUpload: async (key) => void saved.delete(key),
    addUpload: async (fp, u) => {
      const key = `tus::${fp}::${++seq}`;
      saved.set(key, { ...u, fingerprint: fp, urlStorageKey: key });
      return key;
    },
  };
}

/** SHA-256 of a file as the download API streams it. */
async function downloadedSha(srv: TestServer, id: number): Promise<string> {
  const res = await request(`${srv.url}/api/v1/download/${id}`);
  assert.equal(res.statusCode, 200);
  const h = createHash('sha256');
  for await (const chunk of res.body) h.update(chunk as Buffer);
  return h.digest('hex');
}

async function offsetOf(url: string): Promise<number> {
  const res = await request(url, { method: 'HEAD', headers: { 'tus-resumable': '1.0.0' } });
  await res.body.dump();
  assert.equal(res.statusCode, 200);
  return Number(res.headers['upload-offset']);
}

async function bundleFiles(srv: TestServer, code: string): Promise<BundleFile[]> {
  const res = await request(`${srv.url}/api/v1/bundle/${code}`);
  assert.equal(res.statusCode, 200);
  return ((await res.body.json()) as { files: BundleFile[] }).files;
}

for (const backend of backends()) {
  describe(`tus-js-client end to end (${backend})`, () => {
    let srv: TestServer;
    let dir: string;
    let proxy: Relay;
    let endpoint: string;
    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-tusc-'));
      proxy = await relay(() => srv.port);
      endpoint = `http://127.0.0.1:${proxy.port}/api/v1/tus/`;
      srv = await startServer(backend, {
        ANON_MAX_BUNDLE_BYTES: String(256 * MiB),
        SWEEP_INTERVAL_SECONDS: '86400',
        BASE_URL: `http://127.0.0.1:${proxy.port}`,
      });
    });
    after(async () => {
      await srv?.close();
      proxy?.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    beforeEach(async () => {
      await ensureRunning(srv);
    });

    test('a new bundle in several chunks, an append with its token, an interrupted upload resumed', async () => {
      const a = makeFile(dir, 'a.bin', 40 * MiB + 12_345);
      const patches: number[] = [];
      const first = await runUpload(a.file, {
        endpoint,
        chunkSize: 8 * MiB,
        metadata: { filename: 'big-a.bin', filetype: 'application/x-test', description: 'from tus-js-client' },
        onBeforeRequest: (req) => {
          if (req.getMethod() === 'PATCH') patches.push(Number(req.getHeader('Upload-Offset')));
        },
      });
      assert.equal(patches.length, 6, `PATCH offsets ${patches.join(',')}`);
      assert.match(first.shortCode, /^[A-Za-z0-9]{5}$/);
      assert.match(first.uploadToken ?? '', /^[0-9a-f]{64}$/);

      const b = makeFile(dir, 'b.bin', 9 * MiB + 7);
      const second = await runUpload(b.file, {
        endpoint,
        chunkSize: 4 * MiB,
        metadata: { filename: 'b.bin', upload_token: first.uploadToken! },
      });
      assert.equal(second.shortCode, first.shortCode, 'appended to the same bundle');
      assert.equal(second.uploadToken, undefined, 'an append shows no token');

      // Interrupted by the client after a few chunks, then resumed by a new Upload that finds the
      // stored upload URL by the file's fingerprint.
      const c = makeFile(dir, 'c.bin', 24 * MiB + 1);
      const urlStorage = memoryUrlStorage();
      const common: UploadOptions = {
        endpoint,
        chunkSize: 2 * MiB,
        metadata: { filename: 'c.bin', upload_token: first.uploadToken! },
        urlStorage,
        storeFingerprintForResuming: true,
        removeFingerprintOnSuccess: true,
      };
      const stopped = await new Promise<string>((resolve, reject) => {
        const upload = new Upload(fs.createReadStream(c.file), {
          ...common,
          retryDelays: null,
          onError: reject,
          onSuccess: () => reject(new Error('the upload was meant to be interrupted')),
          onChunkComplete: (_size, accepted, total) => {
            if (accepted >= total / 2) {
              upload.abort().then(() => resolve(upload.url!), reject);
            }
          },
        });
        upload.start();
      });
      const offset = await offsetOf(stopped);
      assert.ok(offset >= 12 * MiB && offset < c.size, `stored offset ${offset}`);
      const resumedFrom: number[] = [];
      let posted = 0;
      const third = await runUpload(
        c.file,
        {
          ...common,
          onBeforeRequest: (req) => {
            if (req.getMethod() === 'POST') posted++;
            if (req.getMethod() === 'PATCH') resumedFrom.push(Number(req.getHeader('Upload-Offset')));
          },
        },
        async (u) => {
          const previous = await u.findPreviousUploads();
          assert.equal(previous.length, 1, 'the interrupted upload was remembered');
          assert.equal(previous[0]!.uploadUrl, stopped);
          u.resumeFromPreviousUpload(previous[0]!);
        },
      );
      assert.equal(posted, 0, 'no new upload was created');
      assert.equal(resumedFrom[0], offset, 'the first PATCH starts at the stored offset');
      assert.equal(third.shortCode, first.shortCode);
      assert.deepEqual(await urlStorage.findAllUploads(), [], 'the finished upload was forgotten');

      const files = await bundleFiles(srv, first.shortCode);
      assert.deepEqual(
        files.map((f) => [f.name, f.size]),
        [['big-a.bin', a.size], ['b.bin', b.size], ['c.bin', c.size]],
      );
      assert.equal(files[0]!.mime_type, 'application/x-test');
      for (const [f, want] of [[files[0]!, a], [files[1]!, b], [files[2]!, c]] as const) {
        assert.equal(await downloadedSha(srv, f.id), want.sha, `${f.name} byte-identical`);
      }
      assert.deepEqual([first.fileId, second.fileId, third.fileId], files.map((f) => f.id));
      const [bundle] = await srv.sql<{ d: string; n: number }[]>`select description as d, file_count as n from bundles where short_code = ${first.shortCode}`;
      assert.deepEqual(bundle, { d: 'from tus-js-client', n: 3 });
      assertNoServerErrors(srv);
    });

    test('a connection cut mid-PATCH is retried by the same Upload; uploadUrl resumes a known upload', async () => {
      const d = makeFile(dir, 'd.bin', 16 * MiB + 3);
      const offsets: number[] = [];
      let cutArmed = false;
      {
        const done = await runUpload(d.file, {
          endpoint,
          chunkSize: 12 * MiB,
          // Until the server has seen the cut, made the part durable and released the lease, HEAD and PATCH
          // answer 0 or 423 and use up retries: leave room for a slow fsync on a busy machine.
          retryDelays: [0, 200, 500, 1000, 2000, 4000, 8000],
          metadata: { filename: 'd.bin' },
          onBeforeRequest: (req) => {
            if (req.getMethod() !== 'PATCH') return;
            offsets.push(Number(req.getHeader('Upload-Offset')));
            if (!cutArmed) {
              cutArmed = true;
              proxy.cutNext(5 * MiB);
            }
          },
        });
        assert.equal(proxy.cuts(), 1, 'the first connection was cut');
        assert.equal(offsets[0], 0);
        // A retry that asks HEAD before the cut PATCH has recorded its bytes may see 0 and meet the
        // lease (423, retried again); it ends resuming from what the server holds, not from scratch.
        const last = offsets.at(-1)!;
        assert.ok(last > 0 && last <= 5 * MiB, `resumed from the server's offset, PATCH offsets ${offsets.join(',')}`);
        const [f] = await bundleFiles(srv, done.shortCode);
        assert.equal(f!.size, d.size);
        assert.equal(await downloadedSha(srv, f!.id), d.sha);
      }

      // A client that kept only the upload URL (no fingerprint storage) resumes with `uploadUrl`.
      const e = makeFile(dir, 'e.bin', 6 * MiB);
      const create = await request(endpoint, {
        method: 'POST',
        headers: { 'tus-resumable': '1.0.0', 'upload-length': String(e.size), 'upload-metadata': `filename ${Buffer.from('e.bin').toString('base64')}` },
      });
      await create.body.dump();
      const url = String(create.headers.location);
      const firstMiB = fs.readFileSync(e.file).subarray(0, MiB);
      const p = await request(url, {
        method: 'PATCH',
        headers: { 'tus-resumable': '1.0.0', 'upload-offset': '0', 'content-type': 'application/offset+octet-stream' },
        body: firstMiB,
      });
      await p.body.dump();
      assert.equal(p.statusCode, 204);
      const resumed: number[] = [];
      const done = await runUpload(e.file, {
        uploadUrl: url,
        chunkSize: 2 * MiB,
        onBeforeRequest: (req) => {
          if (req.getMethod() === 'PATCH') resumed.push(Number(req.getHeader('Upload-Offset')));
        },
      });
      assert.equal(resumed[0], MiB);
      const [f] = await bundleFiles(srv, done.shortCode);
      assert.equal(await downloadedSha(srv, f!.id), e.sha);
      assertNoServerErrors(srv);
    });

    /**
     * Runs the resume client (fixtures/tus-resume-client.mjs) once: killed as soon as the request
     * matching `killAt` has been answered by the server, before the client hears that answer; then
     * again, resuming from what the first run stored. Returns the second run's report.
     */
    async function killedAndResumed(file: string, parallel: number, killAt: RegExp): Promise<Done> {
      const store = path.join(dir, `store-${parallel}-${path.basename(file)}.json`);
      const client = path.join(import.meta.dirname, 'fixtures/tus-resume-client.mjs');
      const args = [client, file, endpoint, store, String(parallel), String(MiB)];
      const answered = proxy.holdAnswer(killAt).then(() => 'held');
      const first = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
      let firstErr = '';
      first.stderr.on('data', (c: Buffer) => (firstErr += String(c)));
      const exited = new Promise((r) => first.once('exit', r));
      assert.equal(await Promise.race([answered, exited.then(() => 'exited')]), 'held', `the first run ended before that request: ${firstErr}`);
      first.kill('SIGKILL');
      await exited;
      const second = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      second.stdout.on('data', (c: Buffer) => (out += String(c)));
      second.stderr.on('data', (c: Buffer) => (err += String(c)));
      const code = await new Promise((r) => second.once('exit', r));
      assert.equal(code, 0, `the resumed client failed: ${err}`);
      const r = JSON.parse(out) as { shortCode: string | null; fileId: string | null; uploadToken: string | null };
      return { shortCode: r.shortCode ?? '', fileId: Number(r.fileId), uploadToken: r.uploadToken ?? undefined };
    }

    /** The new bundle's link, file and token as the server holds them. */
    async function assertAnswered(done: Done, d: { sha: string; size: number }): Promise<void> {
      assert.match(done.shortCode, /^[A-Za-z0-9]{5}$/, 'the resumed client learned the link');
      const [f] = await bundleFiles(srv, done.shortCode);
      assert.equal(f!.id, done.fileId);
      assert.equal(f!.size, d.size);
      assert.equal(await downloadedSha(srv, f!.id), d.sha);
      const [b] = await srv.sql<{ upload_token_hash: Uint8Array }[]>`select upload_token_hash from bundles where short_code = ${done.shortCode}`;
      assert.equal(Buffer.from(b!.upload_token_hash).toString('hex'), createHash('sha256').update(done.uploadToken ?? '').digest('hex'), 'and its upload token');
    }

    test('killed while its final concatenation is committed, a parallel upload resumes to the same link', async () => {
      const d = makeFile(dir, 'parallel.bin', 3 * MiB + 17);
      const done = await killedAndResumed(d.file, 2, /^POST [^\r]*\r\n(?:[^\r]+\r\n)*upload-concat: final;/i);
      await assertAnswered(done, d);
      const finals = await srv.sql`select id from tus_uploads where concat like 'final;%' and bundle_id = (select id from bundles where short_code = ${done.shortCode})`;
      assert.equal(finals.length, 1, 'one final upload made the bundle');
      assertNoServerErrors(srv);
    });

    test('killed while its last PATCH is committed, an upload resumed later is told its link by HEAD', async () => {
      const d = makeFile(dir, 'last-patch.bin', 3 * MiB + 5);
      const done = await killedAndResumed(d.file, 1, new RegExp(`^PATCH [^\\r]*\\r\\n(?:[^\\r]+\\r\\n)*upload-offset: ${2 * MiB}\\r\\n`, 'i'));
      await assertAnswered(done, d);
      assertNoServerErrors(srv);
    });
  });
}
