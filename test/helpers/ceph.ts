import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { prerequisite } from './prereq.ts';
import { freePort } from './services.ts';
import { ownDir } from './reaper.ts';

/** Where each cluster lives, under the OS temp dir; test/run.ts removes those of ended runs. */
export const CEPH_DIR_PREFIX = 'sluice-ceph-';

const run = promisify(execFile);
const SCRIPT = path.join(import.meta.dirname, 'ceph-cluster.sh');
const PROGRAMS = ['ceph-mon', 'ceph-osd', 'radosgw', 'radosgw-admin', 'monmaptool', 'ceph-authtool', 'ceph'];
export const CEPH_INSTALL = 'apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd';

/** A running single-node Ceph cluster with radosgw, a user and one empty bucket. */
export interface Ceph {
  readonly endpoint: string;
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly bucket: string;
  /** The variables a Sluice process reads to use this bucket (STORAGE_URL and the SDK's own). */
  env(prefix?: string): Record<string, string>;
  /** A client for the test's own checks (listing leftovers, reading objects behind the store's back). */
  client(): S3Client;
  /** Creates one more empty bucket. */
  createBucket(name: string): Promise<void>;
  /**
   * Frees now what deleted objects held: radosgw leaves their data to its garbage collector, which
   * waits hours by default, and memstore would fill up with it over a run that writes gigabytes.
   */
  purgeDeleted(): Promise<void>;
  /** Stops radosgw only (an outage); startRgw() brings it back on the same port. */
  stopRgw(): Promise<void>;
  /** Freezes radosgw (SIGSTOP: connections accepted by the kernel, never answered), or thaws it. */
  pauseRgw(paused: boolean): void;
  startRgw(): Promise<void>;
  stop(): Promise<void>;
  /** stop(), synchronously: for a process's 'exit' handler. */
  stopSync(): void;
}

function missingProgram(): string | false {
  const dirs = (process.env.PATH ?? '').split(':');
  for (const p of PROGRAMS) {
    if (!dirs.some((d) => fs.existsSync(path.join(d, p)))) return `${p} is not installed`;
  }
  return false;
}

/**
 * The `skip` option for a suite that needs Ceph: locally a missing Ceph skips it and npm test lists
 * it at the end; in CI the file fails, naming the packages to install.
 */
export function cephSkip(what: string): string | false {
  return prerequisite({ what, missing: missingProgram(), install: CEPH_INSTALL });
}

/** Resolves once `url` answers anything; `ca` is the certificate to trust for https. */
function answers(url: string, ca: string | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = (url.startsWith('https:') ? https : http).get(url, { ca, timeout: 1000 }, (res) => {
      res.resume();
      resolve();
    });
    req.on('timeout', () => req.destroy(new Error('no answer in 1 s')));
    req.on('error', reject);
  });
}

async function waitForHttp(url: string, ms: number, dir: string, ca?: string): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    try {
      await answers(url, ca);
      return;
    } catch {
      if (Date.now() > until) {
        const log = path.join(dir, 'log', 'client.rgw.log');
        const tail = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').slice(-15).join('\n') : '(no log)';
        throw new Error(`radosgw did not answer on ${url} within ${ms} ms; its log ends:\n${tail}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/**
 * Starts a throwaway cluster (monitor, one OSD, radosgw on a free port) under a temp directory.
 * memstore keeps every byte in RAM and starts in about 1.5 s; bluestore writes to a sparse file and
 * starts in about 7 s, for runs that write gigabytes; bluestore-lz4 compresses every blob, for a
 * bench that stores more (compressible) bytes than the disk holds. `tls`: radosgw serves https only,
 * with a certificate made for the cluster.
 */
export async function startCeph(opts: { backend?: 'memstore' | 'bluestore' | 'bluestore-lz4'; bucket?: string; tls?: boolean } = {}): Promise<Ceph> {
  const missing = missingProgram();
  if (missing) throw new Error(`Ceph is needed for this test: ${missing}. Install: ${CEPH_INSTALL}`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), CEPH_DIR_PREFIX));
  ownDir(dir);
  const conf = path.join(dir, 'ceph.conf');
  const [monPort, rgwPort] = [await freePort(), await freePort()];
  const endpoint = `${opts.tls ? 'https' : 'http'}://127.0.0.1:${rgwPort}`;
  const certFile = path.join(dir, 'tls.crt');
  /** radosgw's own certificate (PEM) when it serves https, for this process's clients to trust. */
  let ca: string | undefined;
  const stop = async () => {
    await run('bash', [SCRIPT, 'stop', dir]).catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    await run('bash', [SCRIPT, 'start', dir, String(monPort), String(rgwPort), opts.backend ?? 'memstore', opts.tls ? 'tls' : ''], { timeout: 60_000 });
    ca = opts.tls ? fs.readFileSync(certFile, 'utf8') : undefined;
    await waitForHttp(endpoint, 30_000, dir, ca);
  } catch (err) {
    await stop();
    throw err;
  }
  const accessKeyId = `AK${Math.random().toString(36).slice(2, 12).toUpperCase()}`;
  const secretAccessKey = `SK${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
  // client.admin: radosgw-admin must not take radosgw's admin socket.
  await run('radosgw-admin', ['-c', conf, '-n', 'client.admin', 'user', 'create', '--uid=sluice', '--display-name=sluice',
    `--access-key=${accessKeyId}`, `--secret-key=${secretAccessKey}`]);
  const region = 'us-east-1';
  const client = () =>
    new S3Client({
      endpoint, region, forcePathStyle: true, credentials: { accessKeyId, secretAccessKey },
      requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED',
      ...(ca ? { requestHandler: { httpsAgent: new https.Agent({ ca, keepAlive: true }) } } : {}),
    });
  const createBucket = async (name: string) => {
    const c = client();
    try {
      await c.send(new CreateBucketCommand({ Bucket: name }));
    } finally {
      c.destroy();
    }
  };
  const bucket = opts.bucket ?? 'sluice-test';
  await createBucket(bucket);
  const rgwPid = () => Number(fs.readFileSync(path.join(dir, 'run', 'client.pid'), 'utf8'));
  return {
    endpoint, region, accessKeyId, secretAccessKey, bucket, client, createBucket, stop,
    purgeDeleted: async () => {
      await run('radosgw-admin', ['-c', conf, '-n', 'client.admin', 'gc', 'process', '--include-all']);
    },
    stopSync: () => {
      try {
        execFileSync('bash', [SCRIPT, 'stop', dir], { stdio: 'ignore' });
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
    env: (prefix) => ({
      STORAGE_URL: `s3://${bucket}${prefix ? `/${prefix}` : ''}`,
      AWS_ACCESS_KEY_ID: accessKeyId,
      AWS_SECRET_ACCESS_KEY: secretAccessKey,
      AWS_REGION: region,
      AWS_ENDPOINT_URL_S3: endpoint,
      ...(ca ? { NODE_EXTRA_CA_CERTS: certFile } : {}),
    }),
    pauseRgw: (paused) => process.kill(rgwPid(), paused ? 'SIGSTOP' : 'SIGCONT'),
    stopRgw: async () => {
      const pid = rgwPid();
      process.kill(pid, 'SIGKILL');
      while (isAlive(pid)) await new Promise((r) => setTimeout(r, 20));
    },
    startRgw: async () => {
      await run('radosgw', ['-c', conf, '-n', 'client.rgw']);
      await waitForHttp(endpoint, 30_000, dir, ca);
    },
  };
}

/** The daemons detach, so init reaps them, maybe late: a zombie counts as gone. */
function isAlive(pid: number): boolean {
  try {
    return !/^State:\s*Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
}
