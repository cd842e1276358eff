import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import type { Browser, Page } from 'playwright-core';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { chromiumSkip, launchChromium } from './helpers/browser.ts';
import { prerequisite } from './helpers/prereq.ts';
import { freePort } from './helpers/services.ts';
import { hashFile, renderersRss } from './helpers/process-memory.ts';

// End-to-end encryption (age): the page encrypts, the server keeps ciphertext and neutral names only,
// the share link's fragment carries the key, and Debian's `age` reads every file too.
const skip =
  chromiumSkip('end-to-end encryption in a browser (test/e2e-encryption.test.ts)') ||
  prerequisite({
    what: 'end-to-end encryption with the age command (test/e2e-encryption.test.ts)',
    missing: spawnSync('age', ['--version']).status === 0 ? false : 'no `age` command',
    install: 'apt-get install -y age',
  });

const MiB = 1024 * 1024;
const sha256 = (file: string): string => createHash('sha256').update(fs.readFileSync(file)).digest('hex');

describe(`end-to-end encryption with age (${backends()[0]})`, { skip }, () => {
  let srv: TestServer;
  let browser: Browser;
  let dir: string;
  const problems: string[] = [];

  before(async () => {
    const port = await freePort();
    // Room for the opt-in 2 GiB file in one anonymous bundle.
    srv = await startServer(backends()[0]!, { PORT: String(port), BASE_URL: `http://127.0.0.1:${port}`, ANON_MAX_BUNDLE_BYTES: String(3 * 1024 * MiB) });
    browser = await launchChromium();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-e2e-'));
  });
  after(async () => {
    await browser?.close();
    await srv?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  async function newPage(): Promise<Page> {
    const page = await browser.newPage({ acceptDownloads: true });
    page.on('console', (m) => {
      if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));
    return page;
  }

  /** Every byte under DATA_DIR (files, tus parts, the embedded database) and every row, as text. */
  async function serverHolds(needles: Buffer[]): Promise<string[]> {
    const found: string[] = [];
    const walk = (d: string): void => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p);
        else if (e.isFile()) {
          if (needles.some((n) => e.name.includes(n.toString()))) found.push(`name ${p}`);
          const bytes = fs.readFileSync(p);
          for (const n of needles) if (bytes.includes(n)) found.push(`${p} holds ${JSON.stringify(n.toString('latin1').slice(0, 20))}`);
        }
      }
    };
    walk(srv.dataDir);
    const tables = await srv.sql<{ table_name: string }[]>`
      select table_name from information_schema.tables where table_schema = current_schema() and table_type = 'BASE TABLE'`;
    for (const { table_name } of tables) {
      const rows = await srv.sql.unsafe(`select t::text as row from "${table_name}" t`);
      for (const r of rows) for (const n of needles) if (String(r.row).includes(n.toString())) found.push(`row of ${table_name}`);
    }
    return found;
  }

  function age(args: string[], input?: Buffer): { status: number | null; out: Buffer; err: string } {
    const r = spawnSync('age', args, { input, maxBuffer: 256 * MiB });
    return { status: r.status, out: r.stdout, err: r.stderr.toString() };
  }

  test('a 64 MiB file encrypted in the page: the server learns nothing, the link and `age` open it', async () => {
    const name = 'Quarterly-secret-plans-ÅÖ.bin';
    const description = 'Merger notes for the board <do not forward>';
    const plain = path.join(dir, name);
    fs.writeFileSync(plain, randomBytes(64 * MiB));
    const sample = fs.readFileSync(plain).subarray(40 * MiB + 123, 40 * MiB + 187);
    const page = await newPage();
    // 16 MiB tus chunks: the ciphertext goes up in five pieces.
    await page.goto(`${srv.url}/?tus_chunk=${16 * MiB}`);
    await page.setInputFiles('#pick', plain);
    await page.locator('details.options summary').click();
    await page.fill('textarea[name=description]', description);
    await page.check('#encrypt');
    const tusPatches: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'PATCH') tusPatches.push(r.url());
    });
    await page.click('#send');
    await page.locator('#result').waitFor({ state: 'visible', timeout: 120_000 });
    const link = await page.inputValue('#share-link');
    assert.match(link, /^http:\/\/127\.0\.0\.1:\d+\/[A-Za-z0-9]{5}#key=AGE-SECRET-KEY-1[0-9A-Z]{58}$/);
    assert.ok(tusPatches.length >= 5, `ciphertext sent in pieces (${tusPatches.length} PATCHes)`);
    assert.match((await page.locator('#e2e-warning').textContent()) ?? '', /link is the key.*cannot be recovered/s);
    assert.ok(await page.locator('#e2e-warning').isVisible());
    // The QR code carries the whole link, key included.
    const qrcode = createRequire(import.meta.url)('qrcode-generator') as (t: number, l: string) => { addData(s: string): void; make(): void; createDataURL(c: number, m: number): string };
    const qr = qrcode(0, 'M');
    qr.addData(link);
    qr.make();
    assert.equal(await page.getAttribute('#qr', 'src'), qr.createDataURL(6, 2));

    // Nothing readable reached the server: no plaintext bytes, no name, no description, no key.
    const key = link.slice(link.indexOf('#key=') + 5);
    const held = await serverHolds([sample, Buffer.from(name), Buffer.from('Quarterly-secret'), Buffer.from(description), Buffer.from('Merger notes'), Buffer.from(key)]);
    assert.deepEqual(held, []);
    const code = new URL(link).pathname.slice(1);
    const [bundle] = await srv.sql<{ id: number; is_encrypted: boolean; description: string | null }[]>`
      select id, is_encrypted, description from bundles where short_code = ${code}`;
    assert.equal(bundle!.is_encrypted, true);
    assert.equal(bundle!.description, null);
    const files = await srv.sql<{ id: number; name: string; mime_type: string }[]>`
      select id, name, mime_type from files where bundle_id = ${bundle!.id} order by seq`;
    assert.deepEqual(files.map((f) => f.name), ['1.age', 'manifest.age']);

    // The share page decrypts names and description, and saves the file decrypted.
    await page.goto(link);
    await page.locator('body[data-e2e=ready]').waitFor({ timeout: 30_000 });
    assert.deepEqual(await page.locator('#files li.file:visible .name').allTextContents(), [name]);
    assert.equal(await page.locator('.desc').textContent(), description);
    assert.equal(await page.locator('#files img').count(), 0, 'no previews');
    const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#files li.file:visible a.btn').click()]);
    assert.equal(download.suggestedFilename(), name);
    const saved = path.join(dir, 'saved.bin');
    await download.saveAs(saved);
    assert.equal(await download.failure(), null);
    assert.equal(sha256(saved), sha256(plain));
    fs.rmSync(saved);
    await page.locator('#e2e-note', { hasText: 'Saved' }).waitFor();
    // "Download all": a zip of the decrypted files, without the manifest.
    const [zipped] = await Promise.all([page.waitForEvent('download'), page.click('#zip')]);
    assert.equal(zipped.suggestedFilename(), `${new URL(link).pathname.slice(1)}.zip`);
    const zip = path.join(dir, 'all.zip');
    await zipped.saveAs(zip);
    assert.equal(execFileSync('unzip', ['-Z1', zip]).toString(), `${name}\n`);
    const unzipped = execFileSync('unzip', ['-p', zip], { maxBuffer: 128 * MiB });
    assert.equal(createHash('sha256').update(unzipped).digest('hex'), sha256(plain));
    fs.rmSync(zip);

    // The link card names nothing: the description stays out of og tags.
    const html = await (await fetch(`${srv.url}/${code}`)).text();
    assert.doesNotMatch(html, /Merger|Quarterly/);
    assert.match(html, /end-to-end encrypted/);
    assert.equal((await fetch(`${srv.url}/d/${files[0]!.id}?preview=1`)).status, 404);

    // From a shell, as docs/web.md shows: the key from the link, curl, age.
    const keyFile = path.join(dir, 'key.txt');
    execFileSync('sh', ['-c', `printf '%s\\n' "$LINK" | sed 's/.*#key=//' > "$KEY"`], { env: { ...process.env, LINK: link, KEY: keyFile } });
    const out = path.join(dir, 'shell.bin');
    execFileSync('sh', ['-c', `curl -sf "$BASE/api/v1/download/$ID" | age -d -i "$KEY" > "$OUT"`], {
      env: { ...process.env, BASE: srv.url, ID: String(files[0]!.id), KEY: keyFile, OUT: out },
    });
    assert.equal(sha256(out), sha256(plain));
    const manifest = JSON.parse(execFileSync('sh', ['-c', `curl -sf "$BASE/api/v1/download/$ID" | age -d -i "$KEY"`], {
      env: { ...process.env, BASE: srv.url, ID: String(files[1]!.id), KEY: keyFile },
    }).toString());
    assert.deepEqual(manifest.files, [{ stored: '1.age', name, type: 'application/octet-stream', size: 64 * MiB }]);
    assert.equal(manifest.description, description);

    // A wrong key: the page says so, and so does age.
    const wrong = execFileSync('age-keygen', { stdio: ['ignore', 'pipe', 'ignore'] }).toString().match(/AGE-SECRET-KEY-1\S+/)![0];
    await page.goto('about:blank');
    await page.goto(`${srv.url}/${code}#key=${wrong}`);
    await page.locator('#e2e-note.error').waitFor();
    assert.match((await page.locator('#e2e-note').textContent()) ?? '', /key in this link does not open/);
    assert.deepEqual(await page.locator('#files li.file:visible .name').allTextContents(), ['1.age', 'manifest.age'], 'no garbage names');
    fs.writeFileSync(path.join(dir, 'wrong.txt'), `${wrong}\n`);
    const wrongShell = spawnSync('sh', ['-c', `curl -sf "$BASE/api/v1/download/$ID" | age -d -i "$KEY" > /dev/null`], {
      env: { ...process.env, BASE: srv.url, ID: String(files[0]!.id), KEY: path.join(dir, 'wrong.txt') },
    });
    assert.notEqual(wrongShell.status, 0);
    assert.match(wrongShell.stderr.toString(), /no identity matched/);
    // No key at all.
    await page.goto(`${srv.url}/${code}`);
    await page.locator('#e2e-note.error').waitFor();
    assert.match((await page.locator('#e2e-note').textContent()) ?? '', /has no key/);
    await page.close();
    fs.rmSync(plain);
    fs.rmSync(out);
    assert.deepEqual(problems, []);
  });

  test('shell uploads (no manifest): names as stored; a truncated or tampered file fails in the page and in age', async () => {
    const keyFile = path.join(dir, 'shell-key.txt');
    execFileSync('age-keygen', ['-o', keyFile], { stdio: 'ignore' });
    const recipient = execFileSync('age-keygen', ['-y', keyFile]).toString().trim();
    const identity = fs.readFileSync(keyFile, 'utf8').match(/AGE-SECRET-KEY-1\S+/)![0];
    const plain = randomBytes(300 * 1024 + 7);
    fs.writeFileSync(path.join(dir, 'notes.bin'), plain);
    const sealed = age(['-r', recipient, path.join(dir, 'notes.bin')]).out;
    const truncated = sealed.subarray(0, sealed.length - 1000);
    const tampered = Buffer.from(sealed);
    tampered[sealed.length >> 1]! ^= 0x40;
    fs.writeFileSync(path.join(dir, 'truncated.age'), truncated);
    fs.writeFileSync(path.join(dir, 'tampered.age'), tampered);
    // docs/web.md's upload: age -r RECIPIENT file | curl -F 'files[]=@-;filename=…' -F encrypted=1
    const body = execFileSync('sh', ['-c',
      `age -r "$R" "$DIR/notes.bin" | curl -sf -F 'files[]=@-;filename=notes.age' -F 'files[]=@'"$DIR"'/truncated.age' -F 'files[]=@'"$DIR"'/tampered.age' -F encrypted=1 "$BASE/api/v1/upload"`,
    ], { env: { ...process.env, R: recipient, DIR: dir, BASE: srv.url } }).toString();
    const up = JSON.parse(body) as { share_url: string; files: Array<{ id: number; name: string }> };
    const code = up.share_url.slice(1);
    const [b] = await srv.sql<{ is_encrypted: boolean }[]>`select is_encrypted from bundles where short_code = ${code}`;
    assert.equal(b!.is_encrypted, true);
    for (const f of ['truncated.age', 'tampered.age']) {
      const r = age(['-d', '-i', keyFile, path.join(dir, f)]);
      assert.notEqual(r.status, 0, `age refuses ${f}`);
    }

    const page = await newPage();
    await page.goto(`${srv.url}/${code}#key=${identity}`);
    await page.locator('body[data-e2e=ready]').waitFor();
    assert.deepEqual(await page.locator('#files li.file .name').allTextContents(), ['notes', 'truncated', 'tampered']);
    assert.match((await page.locator('#e2e-note').textContent()) ?? '', /names are shown as stored/);
    const rows = page.locator('#files li.file a.btn');
    const [ok] = await Promise.all([page.waitForEvent('download'), rows.nth(0).click()]);
    const saved = path.join(dir, 'notes-saved.bin');
    await ok.saveAs(saved);
    assert.ok(fs.readFileSync(saved).equals(plain));
    assert.equal(ok.suggestedFilename(), 'notes');
    for (const [i, what] of [[1, 'truncated'], [2, 'tampered']] as const) {
      const [dl] = await Promise.all([page.waitForEvent('download'), rows.nth(i).click()]);
      assert.notEqual(await dl.failure(), null, `the browser marks ${what}'s download failed`);
      await page.locator('#e2e-note.error', { hasText: what }).waitFor();
      assert.match((await page.locator('#e2e-note').textContent()) ?? '', /could not be decrypted: it is damaged or was changed/);
    }

    // Encrypted and password-protected: the names are decrypted once the password opens the list.
    const locked = JSON.parse(execFileSync('sh', ['-c',
      `age -r "$R" "$DIR/notes.bin" | curl -sf -F 'files[]=@-;filename=locked.age' -F encrypted=1 -F access_password=hunter22 "$BASE/api/v1/upload"`,
    ], { env: { ...process.env, R: recipient, DIR: dir, BASE: srv.url } }).toString()) as { share_url: string };
    await page.goto(`${srv.url}${locked.share_url}#key=${identity}`);
    await page.fill('#pw', 'hunter22');
    await page.click('#unlock button');
    await page.locator('body[data-e2e=ready]').waitFor();
    assert.deepEqual(await page.locator('#files li.file .name').allTextContents(), ['locked']);
    const [lockedDl] = await Promise.all([page.waitForEvent('download'), page.locator('#files li.file a.btn').click()]);
    await lockedDl.saveAs(saved);
    assert.ok(fs.readFileSync(saved).equals(plain));
    await page.close();
    assert.deepEqual(problems, []);
  });

  test('on a plain-HTTP address other than localhost the page offers no encryption and says why; an encrypted link says the same', async () => {
    // Not a secure context: browsers give such a page no Web Crypto, which encryption needs.
    const elsewhere = await launchChromium(['--host-resolver-rules=MAP sluice.test 127.0.0.1']);
    try {
      const page = await elsewhere.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      const origin = `http://sluice.test:${new URL(srv.url).port}`;
      await page.goto(`${origin}/`);
      assert.equal(await page.evaluate(() => window.isSecureContext), false);
      assert.equal(await page.isDisabled('#encrypt'), true);
      assert.match(await page.locator('label.check').innerText(), /Not available on this address: browsers encrypt only on pages served over HTTPS or from localhost\./);

      const keyFile = path.join(dir, 'insecure-key.txt');
      execFileSync('age-keygen', ['-o', keyFile], { stdio: 'ignore' });
      const recipient = execFileSync('age-keygen', ['-y', keyFile]).toString().trim();
      const identity = fs.readFileSync(keyFile, 'utf8').match(/AGE-SECRET-KEY-1\S+/)![0];
      const up = JSON.parse(execFileSync('sh', ['-c', `echo secret | age -r "$R" | curl -sf -F 'files[]=@-;filename=s.age' -F encrypted=1 "$BASE/api/v1/upload"`], {
        env: { ...process.env, R: recipient, BASE: srv.url },
      }).toString()) as { share_url: string };
      await page.goto(`${origin}${up.share_url}#key=${identity}`);
      await page.locator('#e2e-note.error').waitFor();
      const note = (await page.locator('#e2e-note').textContent()) ?? '';
      assert.match(note, /browsers decrypt only on pages served over HTTPS or from localhost/);
      assert.doesNotMatch(note, /damaged/);
      assert.deepEqual(errors, []);
    } finally {
      await elsewhere.close();
    }
  });

  // Minutes long: run with SLUICE_E2E_BIG=1 (figures in bench/RESULTS.md).
  const big = process.env.SLUICE_E2E_BIG === '1' ? false : 'a 2 GiB round trip: set SLUICE_E2E_BIG=1 to run it';
  test('a 2 GiB file through the page and back keeps the browser\'s memory bounded', { skip: big, timeout: 3_600_000 }, async (t) => {
    const plain = path.join(dir, 'big.bin');
    const block = randomBytes(MiB);
    const fd = fs.openSync(plain, 'w');
    for (let i = 0; i < 2048; i++) fs.writeSync(fd, block);
    fs.closeSync(fd);
    const page = await newPage();
    const peaks = { upload: 0, download: 0, heap: 0 };
    let phase: 'upload' | 'download' = 'upload';
    const timer = setInterval(() => {
      const rss = renderersRss(process.pid);
      peaks[phase] = Math.max(peaks[phase], rss);
      if (process.env.SLUICE_E2E_RSS_LOG) fs.appendFileSync(process.env.SLUICE_E2E_RSS_LOG, `${new Date().toISOString()} ${phase} ${(rss / MiB).toFixed(0)} MiB\n`);
      page.evaluate(() => (performance as unknown as { memory?: { usedJSHeapSize: number } }).memory?.usedJSHeapSize ?? 0)
        .then((h) => (peaks.heap = Math.max(peaks.heap, h)), () => {});
    }, 500);
    try {
      const t0 = Date.now();
      await page.goto(`${srv.url}/`);
      await page.setInputFiles('#pick', plain);
      await page.check('#encrypt');
      await page.click('#send');
      await page.locator('#result:visible, #error:visible').first().waitFor({ timeout: 3_000_000 });
      assert.equal(await page.locator('#error').isVisible(), false, (await page.locator('#error').textContent()) ?? '');
      const up = Date.now() - t0;
      phase = 'download';
      await page.goto(await page.inputValue('#share-link'));
      await page.locator('body[data-e2e=ready]').waitFor();
      const t1 = Date.now();
      const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#files li.file:visible a.btn').click()]);
      const saved = path.join(dir, 'big-saved.bin');
      await download.saveAs(saved);
      const down = Date.now() - t1;
      assert.equal(await hashFile(saved), await hashFile(plain));
      fs.rmSync(saved);
      t.diagnostic(`2 GiB: upload ${(up / 1000).toFixed(0)} s, download ${(down / 1000).toFixed(0)} s; renderer RSS peak upload ${(peaks.upload / MiB).toFixed(0)} MiB, download ${(peaks.download / MiB).toFixed(0)} MiB; JS heap peak ${(peaks.heap / MiB).toFixed(0)} MiB`);
      // The file is 2048 MiB: holding it (or its ciphertext) would show as gigabytes. The sum covers every
      // renderer (about 250 MiB idle) and the garbage the collector has not yet reclaimed.
      assert.ok(peaks.upload < 1024 * MiB && peaks.download < 1024 * MiB, JSON.stringify(peaks));
    } finally {
      clearInterval(timer);
      fs.rmSync(plain, { force: true });
      await page.close();
    }
  });
});
