// Peak memory of the server through a 900 MiB upload and download, and through uploads refused at
// the anonymous cap, the way curl sends them. Runs under every Node the CI legs run (.ci/run): the
// uWebSockets.js build for Node 22 and later keeps reading a paused socket, and a body queued
// without bound made a 900 MiB upload cost about 530 MiB there.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { storageBackends, startServer, type TestServer } from './helpers/server.ts';
import { MiB } from './upload-util.ts';

const SIZE = 900 * MiB;
/**
 * Peak RSS growth over the idle server allowed for any of these transfers: what the write ring,
 * the hash worker, the download pump and the body queue hold, with room for GC timing.
 * The uWS build for Node 20 stays near 25 MiB.
 */
const GROWTH_LIMIT = 64 * MiB;

function status(pid: number): string {
  return fs.readFileSync(`/proc/${pid}/status`, 'utf8');
}
const kib = (text: string, field: string): number => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(text)?.[1] ?? NaN) * 1024;

let lastPeak = 0;

/** Runs `fn`, and says by how much the server's peak RSS (VmHWM) rose over its RSS before it. */
async function peakGrowth(srv: TestServer, fn: () => Promise<void>): Promise<number> {
  const pid = srv.proc.pid!;
  // Writing 5 resets the high-water mark to the current RSS (proc(5), clear_refs).
  fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
  const before = kib(status(pid), 'VmRSS');
  await fn();
  const peak = kib(status(pid), 'VmHWM');
  lastPeak = peak;
  return peak - before;
}

function curl(args: string[]): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn('curl', ['-sS', ...args]);
    let out = '';
    let err = '';
    p.stdout.on('data', (c) => (out += c));
    p.stderr.on('data', (c) => (err += c));
    p.on('exit', (code) => resolve({ code: code ?? -1, out, err }));
  });
}

function makeFile(file: string, bytes: number): void {
  const block = Buffer.alloc(MiB);
  for (let i = 0; i < block.length; i += 4) block.writeUInt32LE((i * 2654435761) >>> 0, i);
  const fd = fs.openSync(file, 'w');
  for (let at = 0, n = 0; at < bytes; at += MiB, n++) {
    block.writeUInt32LE(n, 0);
    fs.writeSync(fd, block, 0, Math.min(MiB, bytes - at));
  }
  fs.closeSync(fd);
}

const node = `Node ${process.version}`;

for (const backend of storageBackends()) {
  describe(`memory through large transfers (${backend}, ${node})`, () => {
    let srv: TestServer;
    let dir: string;
    const big = (): string => path.join(dir, 'big.bin');
    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-mem-'));
      makeFile(big(), SIZE);
      makeFile(path.join(dir, 'over.bin'), 1024 * MiB + MiB);
      makeFile(path.join(dir, 'third.bin'), 360 * MiB);
      // As npm start and the systemd unit run it.
      srv = await startServer(backend, { MALLOC_ARENA_MAX: '2', MALLOC_MMAP_THRESHOLD_: '131072', NODE_OPTIONS: '--max-semi-space-size=4' });
    });
    after(async () => {
      await srv?.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    let fileId = 0;
    it('a 900 MiB curl -F upload', async (t) => {
      let r = { code: 0, out: '', err: '' };
      const growth = await peakGrowth(srv, async () => {
        r = await curl(['-F', `files[]=@${big()}`, `${srv.url}/api/v1/upload`]);
      });
      assert.equal(r.code, 0, r.err);
      const body = JSON.parse(r.out) as { success: boolean; files: Array<{ id: number; size: number }> };
      assert.equal(body.files[0]!.size, SIZE);
      fileId = body.files[0]!.id;
      const metrics = await (await fetch(`${srv.url}/metrics`)).text();
      t.diagnostic(`spilled ${/^sluice_body_spilled_bytes_total (\d+)/m.exec(metrics)?.[1]} bytes`);
      t.diagnostic(`peak RSS growth ${(growth / MiB).toFixed(1)} MiB, peak ${(lastPeak / MiB).toFixed(1)} MiB`);
      assert.ok(growth < GROWTH_LIMIT, `${node}: peak RSS rose ${(growth / MiB).toFixed(1)} MiB (limit ${GROWTH_LIMIT / MiB})`);
    });

    it('a 900 MiB download', async (t) => {
      let r = { code: 0, out: '', err: '' };
      const growth = await peakGrowth(srv, async () => {
        r = await curl(['-o', '/dev/null', '-w', '%{size_download}', `${srv.url}/api/v1/download/${fileId}`]);
      });
      assert.equal(r.code, 0, r.err);
      assert.equal(Number(r.out), SIZE);
      t.diagnostic(`peak RSS growth ${(growth / MiB).toFixed(1)} MiB, peak ${(lastPeak / MiB).toFixed(1)} MiB`);
      assert.ok(growth < GROWTH_LIMIT, `${node}: peak RSS rose ${(growth / MiB).toFixed(1)} MiB (limit ${GROWTH_LIMIT / MiB})`);
    });

    const over: Array<[string, () => string[]]> = [
      ['one file of 1 GiB + 1 MiB', () => ['-F', `files[]=@${path.join(dir, 'over.bin')}`]],
      ['the same, chunked', () => ['-H', 'Transfer-Encoding: chunked', '-F', `files[]=@${path.join(dir, 'over.bin')}`]],
      ['three files of 360 MiB', () => [1, 2, 3].flatMap(() => ['-F', `files[]=@${path.join(dir, 'third.bin')}`])],
    ];
    for (const [name, args] of over) {
      it(`${name} past the anonymous cap: 400`, async (t) => {
        let r = { code: 0, out: '', err: '' };
        const growth = await peakGrowth(srv, async () => {
          r = await curl(['-w', '\n%{http_code} %{size_upload}', ...args(), `${srv.url}/api/v1/upload`]);
        });
        const [json, tail] = r.out.split('\n');
        const [code, sent] = (tail ?? '').split(' ').map(Number);
        assert.equal(code, 400, `${node}: curl exit ${r.code} ${r.err}, answer ${r.out}`);
        assert.match(json!, /"success":false/);
        t.diagnostic(`sent ${sent} bytes`);
        t.diagnostic(`peak RSS growth ${(growth / MiB).toFixed(1)} MiB, peak ${(lastPeak / MiB).toFixed(1)} MiB`);
      assert.ok(growth < GROWTH_LIMIT, `${node}: peak RSS rose ${(growth / MiB).toFixed(1)} MiB (limit ${GROWTH_LIMIT / MiB})`);
      });
    }
  });
}
