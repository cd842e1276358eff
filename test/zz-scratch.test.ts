import { test } from 'node:test';
import { backends, startServer } from './helpers/server.ts';
import { launchChromium } from './helpers/browser.ts';
import { freePort } from './helpers/services.ts';
test('scratch', async () => {
  const port = await freePort();
  const srv = await startServer(backends()[0]!, { PORT: String(port), BASE_URL: `http://127.0.0.1:${port}` });
  const browser = await launchChromium();
  const page = await browser.newPage();
  page.on('console', (m) => console.log('CONSOLE', m.type(), m.text()));
  page.on('pageerror', (e) => console.log('PAGEERR', e.message));
  await page.goto(srv.url + '/');
  const t0 = Date.now();
  console.log('TIMING', await page.evaluate(async () => {
    const w = window as any;
    const k = await w.SluiceAge.newKey();
    const big = new Uint8Array(64 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 65536) crypto.getRandomValues(big.subarray(i, i + 65536));
    const blob = new Blob([big]);
    let t = performance.now();
    const c = await w.SluiceAge.encryptFile(blob, k.recipient);
    const r = w.SluiceAge.pieces(c.stream, 16 * 1024 * 1024); let n = 0; for (;;) { const x = await r.read(); if (x.done) break; n += x.value.length; }
    const enc = performance.now() - t;
    t = performance.now();
    const c2 = await w.SluiceAge.encryptFile(blob, k.recipient);
    const r2 = c2.stream.getReader(); for (;;) { const x = await r2.read(); if (x.done) break; }
    const enc2 = performance.now() - t;
    return JSON.stringify({ enc, enc2, n });
  }), Date.now() - t0);
  await browser.close(); await srv.close();
});
