import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/** The EICAR anti-virus test file: harmless, detected by every scanner (here by our own signature). */
export const EICAR = 'X5O!P%@AP[4\\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*';
/** Bytes that our local signature database names `Sluice.Test.Marker`, wherever they sit in a file. */
export const MARKER = 'SLUICE-TEST-MALWARE-MARKER-7f3a9c2e';
/** StreamMaxLength of the test clamd: files beyond it are scanned in their first 2 MiB only. */
export const TEST_STREAM_MAX = 2 * 1024 * 1024;

export const CLAMD_BIN = ['/usr/sbin/clamd', '/usr/bin/clamd'].find((p) => fs.existsSync(p));

export interface TestClamd {
  /** CLAMD_URL for the server. */
  readonly url: string;
  /** clamd's configuration file (CLAMD_CONF for the server, which reads StreamMaxLength from it). */
  readonly conf: string;
  stop(): Promise<void>;
}

/**
 * Starts Debian's clamd on a Unix socket in a temp directory with a local signature database only
 * (the EICAR file by its MD5, and MARKER as a body signature): no official database, no download.
 * Fails loudly when clamd is not installed (`apt-get install clamav-daemon`).
 */
export async function startClamd(): Promise<TestClamd> {
  if (!CLAMD_BIN) throw new Error('clamd is not installed: apt-get install -y clamav-daemon (test/helpers/clamd.ts)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-clamd-'));
  const db = path.join(dir, 'db');
  fs.mkdirSync(db);
  const md5 = spawnSync('md5sum', { input: EICAR }).stdout.toString().split(' ')[0];
  fs.writeFileSync(path.join(db, 'sluice-test.hdb'), `${md5}:${EICAR.length}:Sluice.Test.EICAR\n`);
  fs.writeFileSync(path.join(db, 'sluice-test.ndb'), `Sluice.Test.Marker:0:*:${Buffer.from(MARKER).toString('hex')}\n`);
  const socket = path.join(dir, 'clamd.sock');
  const conf = path.join(dir, 'clamd.conf');
  fs.writeFileSync(
    conf,
    [
      'Foreground yes',
      `LocalSocket ${socket}`,
      `DatabaseDirectory ${db}`,
      `TemporaryDirectory ${dir}`,
      `PidFile ${path.join(dir, 'clamd.pid')}`,
      `StreamMaxLength ${TEST_STREAM_MAX / 1024 / 1024}M`,
      'MaxThreads 4',
      'LogVerbose no',
      'SelfCheck 0',
      'Bytecode no',
      '',
    ].join('\n'),
  );
  const proc: ChildProcess = spawn(CLAMD_BIN, ['--config-file', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr!.on('data', (c) => (log += c));
  const deadline = Date.now() + 60_000;
  while (!(await ping(socket))) {
    if (proc.exitCode !== null) throw new Error(`clamd exited with ${proc.exitCode}:\n${log}`);
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`clamd did not answer PING within 60 s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url: `unix://${socket}`,
    conf,
    async stop() {
      if (proc.exitCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
        if (proc.exitCode === null) proc.kill('SIGKILL');
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function ping(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(socket);
    let reply = '';
    s.on('data', (d) => (reply += d));
    s.on('error', () => resolve(false));
    s.on('close', () => resolve(reply.includes('PONG')));
    s.on('connect', () => s.end('zPING\0'));
  });
}
