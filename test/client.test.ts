// The command-line client (`sluice send`, `sluice get`) end to end against a real server: what a
// script sees (the link alone on stdout, one line per file, exit statuses), resuming after a kill,
// end-to-end encryption opened by `sluice get` and by the age tool, and the progress bar on a pty.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { ROOT, backends, runCli, startServer, type TestServer } from './helpers/server.ts';
import { relay, type Relay } from './helpers/relay.ts';
import { prerequisite } from './helpers/prereq.ts';
import { hashFile } from './helpers/process-memory.ts';
import { MiB } from './upload-util.ts';

const lines = (s: string): string[] => s.split('\n').filter((l) => l.trim() !== '');
const has = (cmd: string): boolean => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
const ageMissing = prerequisite({ what: 'decrypting a sent bundle with the age tool', missing: has('age') ? false : 'no age command', install: 'apt-get install -y age' });
const scriptMissing = prerequisite({ what: 'the progress bar under a pseudo-terminal', missing: has('script') ? false : 'no script command', install: 'apt-get install -y bsdutils' });

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-client-'));
let stateHome = '';
/** A fresh state folder per test, so one test's interrupted send is never another's. */
const clientEnv = (): Record<string, string> => ({ PATH: process.env.PATH ?? '', HOME: work, XDG_STATE_HOME: stateHome });
const client = (args: string[]): ReturnType<typeof runCli> => runCli(args, clientEnv());
const sends = (): string[] => (fs.existsSync(path.join(stateHome, 'sluice/sends')) ? fs.readdirSync(path.join(stateHome, 'sluice/sends')) : []);

function fileOf(name: string, bytes: number): string {
  const p = path.join(work, name);
  fs.mkdirSync(path.dirname(p), { recursive: true });
  fs.writeFileSync(p, randomBytes(bytes));
  return p;
}

/** The link a send printed: the last line of stdout, alone. */
function linkOf(r: { code: number; stdout: string; stderr: string }): string {
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^http:\/\/127\.0\.0\.1:\d+\/[A-Za-z0-9_-]+(#key=AGE-SECRET-KEY-1[0-9A-Z]+)?\n$/, `stdout is the link alone: ${JSON.stringify(r.stdout)}`);
  return r.stdout.trim();
}

async function sha256Via(srv: TestServer, code: string, headers: Record<string, string> = {}): Promise<Map<string, string>> {
  const info = (await (await request(`${srv.url}/api/v1/bundle/${code}`, { headers })).body.json()) as { files: Array<{ id: number; name: string }> };
  const out = new Map<string, string>();
  for (const f of info.files) {
    const p = path.join(work, `dl-${f.id}`);
    const res = await request(`${srv.url}/d/${f.id}`, { headers });
    assert.equal(res.statusCode, 200);
    await fs.promises.writeFile(p, res.body);
    out.set(f.name, await hashFile(p));
  }
  return out;
}

describe('sluice send and sluice get', () => {
  let srv: TestServer;
  let proxy: Relay;
  before(async () => {
    srv = await startServer(backends()[0]!);
    proxy = await relay(() => srv.port);
  });
  after(async () => {
    proxy?.close();
    await srv?.close();
    fs.rmSync(work, { recursive: true, force: true });
  });
  const fresh = (): void => {
    stateHome = fs.mkdtempSync(path.join(work, 'state-'));
  };

  test('send prints the link alone on stdout and a line per file; get writes the same files', async () => {
    fresh();
    const a = fileOf('one/a.bin', 3 * MiB + 17);
    const b = fileOf('one/sub/b.txt', 10);
    const empty = fileOf('empty.txt', 0);
    const r = await client(['send', '--server', srv.url, path.join(work, 'one'), empty]);
    const link = linkOf(r);
    assert.deepEqual(lines(r.stderr).map((l) => l.split(' ').slice(0, 2).join(' ')), ['sent a.bin', 'sent b.txt', 'sent empty.txt']);
    assert.deepEqual(sends(), [], 'a finished send leaves no state behind');
    const dir = path.join(work, 'got-one');
    const g = await client(['get', link, '-o', dir]);
    assert.equal(g.code, 0, g.stderr);
    assert.deepEqual(lines(g.stdout), ['a.bin', 'b.txt', 'empty.txt'].map((n) => path.join(dir, n)));
    for (const [src, name] of [[a, 'a.bin'], [b, 'b.txt'], [empty, 'empty.txt']] as const) {
      assert.equal(await hashFile(path.join(dir, name)), await hashFile(src), name);
    }
    assert.deepEqual(fs.readdirSync(dir).filter((n) => n.startsWith('.')), [], 'no part files left');
    const again = await client(['get', link, '-o', dir]);
    assert.equal(again.code, 0, 'a second get finds the files there');
    const zip = await client(['get', link, '--zip', '-o', dir]);
    assert.equal(zip.code, 0, zip.stderr);
    assert.ok(fs.statSync(path.join(dir, `${new URL(link).pathname.slice(1)}.zip`)).size > 3 * MiB);
  });

  test('a 300 MiB send killed at half resumes and sends less than 60% again; the bytes match through the link', async (t) => {
    fresh();
    const big = fileOf('big.bin', 300 * MiB);
    const server = `http://127.0.0.1:${proxy.port}`;
    proxy.reset();
    const stalled = proxy.stallUpAfter(150 * MiB);
    const first = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'send', '--server', server, big], { env: clientEnv() });
    const ended = new Promise((resolve) => first.on('exit', resolve));
    await stalled;
    first.kill('SIGKILL');
    await ended;
    assert.equal(sends().length, 1, 'the killed send left its state');
    proxy.reset();
    const r = await client(['send', '--server', server, big]);
    const link = linkOf(r);
    assert.match(r.stderr, /resumed at/);
    const again = proxy.up() / (300 * MiB);
    t.diagnostic(`the resumed send carried ${proxy.up()} bytes: ${(again * 100).toFixed(1)}% of the file`);
    assert.ok(again < 0.6, `the resumed send carried ${(again * 100).toFixed(1)}% of the file`);
    assert.ok(again > 0.3, `and not less than what was missing (${(again * 100).toFixed(1)}%)`);
    const code = new URL(link).pathname.slice(1);
    assert.deepEqual([...(await sha256Via(srv, code)).values()], [await hashFile(big)]);
    fs.rmSync(big);
  });

  test('an encrypted send opens with sluice get and with age -d; the server sees only ciphertext', { skip: ageMissing }, async () => {
    fresh();
    const secret = fileOf('enc/report.pdf', 2 * MiB + 5);
    const note = fileOf('enc/note.txt', 100);
    const link = linkOf(await client(['send', '--encrypt', '--server', srv.url, secret, note]));
    const key = new URL(link).hash.replace('#key=', '');
    const code = new URL(link).pathname.slice(1);
    const info = (await (await request(`${srv.url}/api/v1/bundle/${code}`)).body.json()) as { is_encrypted: boolean; files: Array<{ id: number; name: string }> };
    assert.equal(info.is_encrypted, true);
    assert.deepEqual(info.files.map((f) => f.name), ['1.age', '2.age', 'manifest.age']);
    const dir = path.join(work, 'got-enc');
    const g = await client(['get', link, '-o', dir]);
    assert.equal(g.code, 0, g.stderr);
    assert.equal(await hashFile(path.join(dir, 'report.pdf')), await hashFile(secret));
    assert.equal(await hashFile(path.join(dir, 'note.txt')), await hashFile(note));
    const keyFile = path.join(work, 'key.txt');
    fs.writeFileSync(keyFile, `${key}\n`);
    const cipher = path.join(work, 'cipher.age');
    fs.writeFileSync(cipher, Buffer.from(await (await request(`${srv.url}/api/v1/download/${info.files[0]!.id}`)).body.arrayBuffer()));
    execFileSync('age', ['-d', '-i', keyFile, '-o', path.join(work, 'plain.pdf'), cipher]);
    assert.equal(await hashFile(path.join(work, 'plain.pdf')), await hashFile(secret), 'age -d gives the file back');
    const wrong = await client(['get', link.replace(/#key=.*/, `#key=${'AGE-SECRET-KEY-1'.padEnd(74, 'Q')}`), '-o', path.join(work, 'got-wrong')]);
    assert.equal(wrong.code, 7, wrong.stderr);
  });

  test('Ctrl-C during an encrypted send ends with 130; the same command resumes from the same ciphertext', async () => {
    fresh();
    const f = fileOf('enc-int/movie.mkv', 40 * MiB);
    const server = `http://127.0.0.1:${proxy.port}`;
    proxy.reset();
    const stalled = proxy.stallUpAfter(20 * MiB);
    const first = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'send', '--encrypt', '--server', server, f], { env: clientEnv() });
    let stderr = '';
    first.stderr.on('data', (c) => (stderr += c));
    const ended = new Promise<number | null>((resolve) => first.on('exit', resolve));
    await stalled;
    first.kill('SIGINT');
    assert.equal(await ended, 130, stderr);
    assert.match(stderr, /interrupted: run the same command again to resume/);
    proxy.reset();
    const link = linkOf(await client(['send', '--encrypt', '--server', server, f]));
    assert.ok(proxy.up() < 30 * MiB, `the rest of the ciphertext only (${proxy.up()} bytes)`);
    assert.deepEqual(sends(), [], 'the state and its ciphertext are gone once sent');
    const dir = path.join(work, 'got-enc-int');
    assert.equal((await client(['get', link, '-o', dir])).code, 0);
    assert.equal(await hashFile(path.join(dir, 'movie.mkv')), await hashFile(f));
  });

  test('a send whose bundle was deleted meanwhile says so once, then starts a new bundle', async () => {
    fresh();
    const small = fileOf('gone/a.txt', 1000);
    const large = fileOf('gone/b.bin', 20 * MiB);
    const server = `http://127.0.0.1:${proxy.port}`;
    const stalled = proxy.stallUpAfter(12 * MiB);
    const first = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'send', '--server', server, small, large], { env: clientEnv() });
    const ended = new Promise((resolve) => first.on('exit', resolve));
    await stalled;
    first.kill('SIGKILL');
    await ended;
    const [state] = sends();
    const { shareUrl } = JSON.parse(fs.readFileSync(path.join(stateHome, 'sluice/sends', state!), 'utf8')) as { shareUrl: string };
    assert.equal((await srv.cli(['bundles', 'delete', shareUrl.slice(1)])).code, 0);
    const refused = await client(['send', '--server', server, small, large]);
    assert.equal(refused.code, 3, refused.stderr);
    assert.match(refused.stderr, /the bundle is gone, so the same command now starts a new one/);
    const again = await client(['send', '--server', server, small, large]);
    assert.notEqual(linkOf(again), `${server}${shareUrl}`);
  });

  test('a password-protected bundle: get takes --password-file, says which password is missing or wrong', async () => {
    fresh();
    const f = fileOf('locked.bin', 1000);
    const pw = path.join(work, 'pw');
    fs.writeFileSync(pw, 'open sesame\n');
    const link = linkOf(await client(['send', '--password-file', pw, '--max-downloads', '5', '--server', srv.url, f]));
    const none = await client(['get', link, '-o', path.join(work, 'got-locked')]);
    assert.equal(none.code, 6);
    assert.match(none.stderr, /--password-file/);
    fs.writeFileSync(path.join(work, 'bad'), 'nope\n');
    const bad = await client(['get', link, '--password-file', path.join(work, 'bad'), '-o', path.join(work, 'got-locked')]);
    assert.equal(bad.code, 6);
    assert.equal(lines(bad.stderr).length, 1, bad.stderr);
    const ok = await client(['get', link, '--password-file', pw, '-o', path.join(work, 'got-locked')]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(await hashFile(path.join(work, 'got-locked/locked.bin')), await hashFile(f));
  });

  test('a Premium key names the link; get follows a vanity link; a taken name is refused with 3', async () => {
    fresh();
    const made = await srv.cli(['keys', 'create', '--plan', 'premium']);
    assert.equal(made.code, 0, made.stderr);
    const key = made.stdout.trim();
    const f = fileOf('named.txt', 123);
    const name = `cli-${randomBytes(4).toString('hex')}`;
    const r = await runCli(['send', '--vanity', name, '--server', srv.url, f], { ...clientEnv(), SLUICE_KEY: key });
    assert.equal(linkOf(r), `${srv.url}/${name}`);
    const dir = path.join(work, 'got-named');
    const g = await client(['get', `${srv.url}/${name}`, '-o', dir]);
    assert.equal(g.code, 0, g.stderr);
    assert.equal(await hashFile(path.join(dir, 'named.txt')), await hashFile(f));
    const taken = await client(['send', '--key', key, '--vanity', name, '--server', srv.url, f]);
    assert.equal(taken.code, 3, taken.stderr);
    assert.match(taken.stderr, /already in use/);
  });

  test('get resumes a partial file with a range request', async () => {
    fresh();
    const f = fileOf('resume-get.bin', 8 * MiB);
    const link = linkOf(await client(['send', '--server', srv.url, f]));
    const code = new URL(link).pathname.slice(1);
    const info = (await (await request(`${srv.url}/api/v1/bundle/${code}`)).body.json()) as { files: Array<{ id: number }> };
    const dir = path.join(work, 'got-partial');
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, `.sluice-${info.files[0]!.id}.part`), fs.readFileSync(f).subarray(0, 6 * MiB));
    proxy.reset();
    const g = await client(['get', `http://127.0.0.1:${proxy.port}/${code}`, '-o', dir]);
    assert.equal(g.code, 0, g.stderr);
    assert.ok(proxy.down() < 3 * MiB, `only the missing bytes came down (${proxy.down()})`);
    assert.equal(await hashFile(path.join(dir, 'resume-get.bin')), await hashFile(f));
  });

  test('failures are one line with a distinct exit status', async () => {
    fresh();
    const f = fileOf('small.bin', 10);
    const closed = await client(['send', '--server', 'http://127.0.0.1:9', f]);
    assert.equal(closed.code, 2, closed.stderr);
    assert.match(closed.stderr, /cannot reach http:\/\/127\.0\.0\.1:9/);
    const missing = await client(['send', '--server', srv.url, path.join(work, 'no-such-file')]);
    assert.equal(missing.code, 1);
    const badFlag = await client(['send', '--max-downloads', '0', f]);
    assert.equal(badFlag.code, 1);
    const gone = await client(['get', `${srv.url}/ZZZZZ`]);
    assert.equal(gone.code, 3, gone.stderr);
    assert.match(gone.stderr, /no such bundle/);
    for (const r of [closed, missing, badFlag, gone]) assert.equal(lines(r.stderr).length, 1, r.stderr);
  });

  test('the progress bar on a terminal: bytes, rate, ETA; the link still last and alone', { skip: scriptMissing }, async () => {
    fresh();
    const f = fileOf('pty.bin', 40 * MiB);
    const cmd = [process.execPath, path.join(ROOT, 'bin/sluice.js'), 'send', '--server', srv.url, f].map((a) => `'${a}'`).join(' ');
    const out = await new Promise<{ code: number | null; text: string }>((resolve) => {
      const p = spawn('script', ['-q', '-e', '-c', cmd, '/dev/null'], { env: { ...clientEnv(), TERM: 'xterm', COLUMNS: '120' } });
      let text = '';
      p.stdout.on('data', (c) => (text += c));
      p.on('exit', (code) => resolve({ code, text }));
    });
    assert.equal(out.code, 0, out.text);
    // eslint-disable-next-line no-control-regex
    const plain = out.text.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '');
    assert.match(plain, /100% \| 40 MB\/40 MB \| [\d.]+ [KMG]?B\/s \| ETA \d+s \| pty\.bin/);
    const last = lines(plain.replace(/\r/g, '\n')).pop();
    assert.match(last ?? '', /^http:\/\/127\.0\.0\.1:\d+\/[A-Za-z0-9]{5}$/);
  });

  describe('against the limits of a small plan', () => {
    let tight: TestServer;
    before(async () => {
      tight = await startServer(backends()[0]!, { ANON_MAX_BUNDLE_BYTES: String(MiB), RATE_LIMIT_ANON_PER_HOUR: '4', ANON_EXPIRY_DAYS: '3' });
    });
    after(async () => {
      await tight?.close();
    });

    test('options reach the bundle; over the cap is 5; out of budget is 4 with the time to retry', async () => {
      fresh();
      const f = fileOf('opt.bin', 1000);
      const link = linkOf(await client(['send', '--expires-days', '1', '--max-downloads', '2', '--server', tight.url, f]));
      const info = (await (await request(`${tight.url}/api/v1/bundle/${new URL(link).pathname.slice(1)}`)).body.json()) as { expires_at: string; max_downloads: number };
      assert.equal(info.max_downloads, 2);
      const hours = (Date.parse(`${info.expires_at.replace(' ', 'T')}Z`) - Date.now()) / 3_600_000;
      assert.ok(hours > 23 && hours <= 24, `expires in a day (${hours.toFixed(2)} h)`);
      const tooLong = await client(['send', '--expires-days', '4', '--server', tight.url, f]);
      assert.equal(tooLong.code, 3, tooLong.stderr);
      assert.match(tooLong.stderr, /expires_in_days must be a whole number from 1 to 3/);
      const big = fileOf('over.bin', 2 * MiB);
      const over = await client(['send', '--server', tight.url, big]);
      assert.equal(over.code, 5, over.stderr);
      assert.match(over.stderr, /over the size cap/);
      // Spend what is left of the hour's budget, then one more send.
      for (let status = 0; status !== 429; ) {
        const res = await request(`${tight.url}/api/v1/bundle/AAAAA`);
        await res.body.dump();
        status = res.statusCode;
      }
      const limited = await client(['send', '--server', tight.url, f]);
      assert.equal(limited.code, 4, limited.stderr);
      assert.match(limited.stderr, /rate limited, try again in \d+ (seconds|minutes) \(at \d\d:\d\d UTC\)/);
      for (const r of [tooLong, over, limited]) assert.equal(lines(r.stderr).length, 1, r.stderr);
    });
  });
});
