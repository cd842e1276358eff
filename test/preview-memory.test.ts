/**
 * Previews within their memory budget whatever the image: decoder bombs of every format the server
 * decodes, at the pixel limit, cost the render process under PREVIEW_MEMORY_BYTES and the server
 * nothing; a decoder that goes over its budget anyway is killed, and the next image renders.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import pino from 'pino';
import { request } from 'undici';
import sharp from 'sharp';
import { storageBackends, startServer, type TestServer } from './helpers/server.ts';
import { uploaded } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';
import { anonBytes, createRenderer } from '../src/thumbs/render-process.ts';
import { MAX_INPUT_PIXELS, PREVIEW_MEMORY_BYTES } from '../src/thumbs/preview.ts';

const MiB = 2 ** 20;
const rss = (pid: number): number => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
const childrenOf = (pid: number): number[] =>
  fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
const alive = (pid: number): boolean => fs.existsSync(`/proc/${pid}`);

const blank = (w: number, h: number, channels: 3 | 4 = 3) =>
  sharp({ create: { width: w, height: h, channels, background: { r: 10, g: 20, b: 30, alpha: 0.5 } } });
// The largest images the pixel limit lets through, in each format's most expensive form to decode.
const side = Math.floor(Math.sqrt(MAX_INPUT_PIXELS));
const BOMBS: Record<string, () => Promise<Buffer>> = {
  'avif.avif': () => blank(side, side).avif({ quality: 30, effort: 0 }).toBuffer(),
  'progressive.jpg': () => blank(8000, 6000).jpeg({ progressive: true, quality: 50 }).toBuffer(),
  'interlaced.png': () => blank(side, side).png({ progressive: true, compressionLevel: 9 }).toBuffer(),
  'interlaced16.png': () => blank(side, side, 4).toColourspace('rgb16').png({ progressive: true, compressionLevel: 9 }).toBuffer(),
  'plain.png': () => blank(side, side, 4).png({ compressionLevel: 9 }).toBuffer(),
  'frame.gif': () => blank(side, side).gif().toBuffer(),
  'lossless.webp': () => blank(side, side, 4).webp({ lossless: true, effort: 0 }).toBuffer(),
  'tiled.tiff': () => blank(side, side).tiff({ compression: 'deflate', tile: true }).toBuffer(),
  'strips.tiff': () => blank(side, side).tiff({ compression: 'deflate' }).toBuffer(),
};
let bombs: Array<{ name: string; data: Buffer }>;
const small = () => blank(64, 48).png().toBuffer();
const log = pino({ level: 'silent' });

before(async () => {
  bombs = await Promise.all(Object.entries(BOMBS).map(async ([name, make]) => ({ name, data: await make() })));
  // Each compresses to a small upload: the size a file shows says nothing of what decoding it costs.
  for (const b of bombs) assert.ok(b.data.length < 1_000_000, `${b.name}: ${b.data.length} bytes`);
});

test('the render process is killed past its budget, the job refused as memory; the next image gets a fresh process', async () => {
  const dir = fs.mkdtempSync('/tmp/sluice-render-');
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const heavy = `${dir}/interlaced16.png`;
  fs.writeFileSync(heavy, await blank(3500, 3500, 4).toColourspace('rgb16').png({ progressive: true }).toBuffer());
  fs.writeFileSync(`${dir}/small.png`, await small());
  // The header check off, and a budget the image's decoding is sure to pass (it takes about 130 MiB).
  const budget = 48 * MiB;
  const r = createRenderer({ log, budgetBytes: budget, headerBudgetBytes: Infinity, maxPixels: MAX_INPUT_PIXELS, cardPixels: 1 });
  after(() => r.close());
  const first = await r.thumbnail(`${dir}/small.png`, 320);
  assert.ok('bytes' in first && (await sharp(first.bytes).metadata()).format === 'webp');
  const pid = r.pid()!;
  const base = anonBytes(pid)!;
  let peak = 0;
  const sampler = setInterval(() => alive(pid) && (peak = Math.max(peak, (anonBytes(pid) ?? base) - base)), 1);
  const refused = await r.thumbnail(heavy, 320);
  clearInterval(sampler);
  assert.deepEqual(refused, { none: 'memory', detail: undefined });
  await waitFor('killed render process gone', () => !alive(pid) || fs.readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z'));
  assert.ok(peak < budget + 32 * MiB, `peak ${(peak / MiB).toFixed(0)} MiB over idle with a ${budget / MiB} MiB budget`);
  const next = await r.thumbnail(`${dir}/small.png`, 320);
  assert.ok('bytes' in next, JSON.stringify(next));
  assert.notEqual(r.pid(), pid);

  // With the header check on, the same image is refused before a pixel is decoded.
  const checked = createRenderer({ log, budgetBytes: budget, maxPixels: MAX_INPUT_PIXELS, cardPixels: 1 });
  after(() => checked.close());
  const early = await checked.thumbnail(heavy, 320);
  assert.equal('none' in early && early.none, 'too_large');
});

test('an idle render process leaves; close() waits for it', async () => {
  const dir = fs.mkdtempSync('/tmp/sluice-render-');
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.writeFileSync(`${dir}/small.png`, await small());
  const r = createRenderer({ log, budgetBytes: PREVIEW_MEMORY_BYTES, maxPixels: MAX_INPUT_PIXELS, cardPixels: 1, idleMs: 10 });
  assert.ok('bytes' in (await r.thumbnail(`${dir}/small.png`, 320)));
  const pid = r.pid()!;
  await waitFor('idle render process gone', () => !alive(pid) || fs.readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z'));
  assert.ok('bytes' in (await r.thumbnail(`${dir}/small.png`, 320)), 'a new process for the next job');
  const again = r.pid()!;
  await r.close();
  assert.ok(!alive(again) || fs.readFileSync(`/proc/${again}/stat`, 'utf8').includes(') Z'));
  // A file that is not an image is a refusal, not a failure.
  fs.writeFileSync(`${dir}/junk.png`, Buffer.from('\x89PNG\r\n\x1a\n not really'));
  const junk = createRenderer({ log, budgetBytes: PREVIEW_MEMORY_BYTES, maxPixels: MAX_INPUT_PIXELS, cardPixels: 1 });
  const j = await junk.thumbnail(`${dir}/junk.png`, 320);
  await junk.close();
  assert.equal('none' in j && j.none, 'undecodable');
});

for (const backend of storageBackends()) {
  describe(`preview memory (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    test('decoder bombs of every format: the render process stays within its budget, the server grows by nothing; the files still download', async () => {
      const b = await uploaded(srv, bombs.map((x) => ({ ...x, type: 'application/octet-stream' })));
      const files = b.files as Array<{ id: number; name: string }>;
      // The render process starts with the first image request: a small image first, so what is measured is each bomb.
      const s = await uploaded(srv, [{ name: 'small.png', data: await small(), type: 'image/png' }]);
      assert.equal((await request(`${srv.url}/d/${(s.files as Array<{ id: number }>)[0]!.id}?preview=1`)).statusCode, 200);
      const server = srv.proc.pid!;
      const [child] = childrenOf(server);
      assert.ok(child, 'a render process beside the server');
      const serverBase = rss(server);
      let serverPeak = serverBase;
      const childPeak = new Map<number, number>();
      const childBase = new Map<number, number>([[child, anonBytes(child)!]]);
      const sampler = setInterval(() => {
        serverPeak = Math.max(serverPeak, rss(server));
        for (const pid of childrenOf(server)) {
          const a = anonBytes(pid);
          if (a === null) continue;
          if (!childBase.has(pid)) childBase.set(pid, a);
          childPeak.set(pid, Math.max(childPeak.get(pid) ?? 0, a - childBase.get(pid)!));
        }
      }, 2);
      const answers: Record<string, number> = {};
      try {
        for (const f of files) {
          // Two at once: they share one render.
          const two = await Promise.all([1, 2].map(async () => {
            const r = await request(`${srv.url}/d/${f.id}?preview=1`);
            await r.body.arrayBuffer();
            return r.statusCode;
          }));
          assert.equal(two[0], two[1], f.name);
          answers[f.name] = two[0]!;
        }
      } finally {
        clearInterval(sampler);
      }
      const worst = Math.max(0, ...childPeak.values());
      const report = `${JSON.stringify(answers)}; render process peak +${(worst / MiB).toFixed(0)} MiB, server +${((serverPeak - serverBase) / MiB).toFixed(0)} MiB`;
      console.log(`# ${backend}: ${report}`);
      for (const [name, status] of Object.entries(answers)) assert.ok(status === 404 || status === 200, `${name}: ${status}`);
      // The ones that would cost most are refused; the ones decoded in strips get their thumbnail.
      for (const name of ['avif.avif', 'interlaced.png', 'frame.gif']) assert.equal(answers[name], 404, `${name}: ${report}`);
      for (const name of ['plain.png', 'strips.tiff']) assert.equal(answers[name], 200, `${name}: ${report}`);
      assert.ok(worst < PREVIEW_MEMORY_BYTES, report);
      assert.ok(serverPeak - serverBase < 24 * MiB, report);

      const metrics = await (await request(`${srv.url}/metrics`)).body.text();
      assert.match(metrics, /^sluice_preview_refused_total\{reason="too_large"\} [1-9]/m);
      const page = await request(`${srv.url}/${b.short_code}`);
      assert.equal(page.statusCode, 200);
      assert.match(await page.body.text(), /avif\.avif/);
      const d = await request(`${srv.url}/d/${files[0]!.id}`);
      assert.equal(Buffer.from(await d.body.arrayBuffer()).length, bombs[0]!.data.length);
    });
  });
}
