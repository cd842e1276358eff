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

  test('a 300 MiB send killed at half resumes and sends less than 60% again; the bytes match through the link', async () => {
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
});
