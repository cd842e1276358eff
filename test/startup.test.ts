/**
 * What a person sees when starting Sluice: misspelt settings named, the help for a bare `sluice`,
 * and on a terminal a line with the address to open and the mode; JSON lines otherwise.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { ROOT, runCli, scratchDataDir } from './helpers/server.ts';
import { openAddresses, modeLine } from '../src/cli/banner.ts';
import { waitFor } from './helpers/wait.ts';

describe('start-up messages', () => {
  const { env } = scratchDataDir('sl-start-');

  test('a misspelt setting is warned about, naming the one it resembles; the help needs no configuration', async () => {
    const r = await runCli(['migrate'], env({ DATABSE_URL: 'postgres://x', REDIS_ULR: 'redis://x', PROT: '9090' }));
    assert.equal(r.code, 0, r.stderr);
    for (const [typo, meant] of [['DATABSE_URL', 'DATABASE_URL'], ['REDIS_ULR', 'REDIS_URL'], ['PROT', 'PORT']]) {
      assert.match(r.stderr, new RegExp(`^sluice: warning: ${typo} is not a setting; did you mean ${meant}\\?`, 'm'));
    }
    const help = await runCli([], env({ PORT: 'abc' }));
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /^usage: sluice <command>/);
  });

  test('serve says where to open it and in which mode: text with LOG_FORMAT=text, JSON otherwise', async () => {
    const started = (extra: Record<string, string>, until: RegExp): Promise<string> =>
      new Promise((resolve, reject) => {
        const proc = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'serve'], { cwd: ROOT, env: env({ PORT: '0', HOST: '127.0.0.1', ...extra }) });
        let out = '';
        const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000);
        proc.stderr.setEncoding('utf8');
        proc.stderr.on('data', (c: string) => {
          out += c;
          if (until.test(out)) proc.kill('SIGTERM');
        });
        proc.once('exit', () => {
          clearTimeout(timer);
          if (until.test(out)) resolve(out);
          else reject(new Error(`no ${until} in:\n${out}`));
        });
      });
    const text = await started({ LOG_FORMAT: 'text', PROT: '1' }, /Sluice is ready[^\n]*\n.*\n/);
    assert.match(text, /^Sluice is ready: open http:\/\/127\.0\.0\.1:\d+\/$/m);
    assert.match(text, /database: embedded \(\S+\/postgres\) · state: in-process · storage: disk \(\S+\/files\)/);
    assert.match(text, /^\d\d:\d\d:\d\d warn  PROT is not a setting; did you mean PORT\?/m);
    assert.doesNotMatch(text, /^\{/m, 'no JSON on a terminal');
    const json = await started({ PROT: '1' }, /"msg":"sluice listening"/);
    assert.doesNotMatch(json, /Sluice is ready/, 'no TTY: JSON only');
    assert.match(json, /"level":40[^\n]*"msg":"PROT is not a setting; did you mean PORT\?/);
  });

  test('started from a terminal, the server ends when the terminal closes, and the next start finds its data dir free', async () => {
    // script(1) gives the server a terminal of its own; killing script closes it, and the kernel hangs up
    // the session (SIGHUP), as closing a terminal window does.
    const serve = (): ChildProcess =>
      spawn('script', ['-qfec', `exec ${process.execPath} ${path.join(ROOT, 'bin/sluice.js')} serve`, '/dev/null'], {
        cwd: ROOT,
        env: env({ PORT: '0', HOST: '127.0.0.1', LOG_FORMAT: 'json', SHUTDOWN_GRACE_SECONDS: '5' }),
      });
    const listening = async (term: ChildProcess): Promise<number> => {
      let out = '';
      term.stdout!.setEncoding('utf8');
      term.stdout!.on('data', (c: string) => (out += c));
      const line = await waitFor('the server listening on its terminal', () => out.split('\n').find((l) => l.includes('"msg":"sluice listening"')), 60_000);
      return (JSON.parse(line) as { pid: number }).pid;
    };
    const first = serve();
    const pid = await listening(first);
    first.kill('SIGKILL');
    await waitFor('the server gone with its terminal', () => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    });
    const second = serve();
    try {
      assert.ok((await listening(second)) > 0, 'the next start serves on the same data dir');
    } finally {
      second.kill('SIGKILL');
    }
  });

  test('the addresses to open and the mode, without credentials', () => {
    const ifaces = { eth0: [{ address: '192.0.2.5', family: 'IPv4', internal: false }], lo: [{ address: '127.0.0.1', family: 'IPv4', internal: true }] };
    const any = ifaces as unknown as Parameters<typeof openAddresses>[2];
    assert.deepEqual(openAddresses({ host: '0.0.0.0', baseUrl: 'http://localhost:8080', baseUrlFollowsPort: true }, 8080, any), ['http://localhost:8080/', 'http://192.0.2.5:8080/']);
    assert.deepEqual(openAddresses({ host: '0.0.0.0', baseUrl: 'https://files.example.com', baseUrlFollowsPort: false }, 8080, any), ['https://files.example.com/']);
    assert.deepEqual(openAddresses({ host: '::1', baseUrl: '', baseUrlFollowsPort: true }, 9000, any), ['http://[::1]:9000/']);
    const mode = modeLine({ databaseUrl: 'postgres://sluice:s3cret@db.example:5432/sluice', redisUrl: 'redis://:pw@cache:6379/0', dataDir: '/var/lib/sluice' });
    assert.equal(mode, 'database: PostgreSQL at db.example:5432/sluice · state: Redis at cache:6379/0 · storage: disk (/var/lib/sluice/files)');
  });
});
