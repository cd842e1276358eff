/** Shared by the zip tests: a yazl reference builder, external validators and small HTTP helpers. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { ZipFile } from 'yazl';
import { request } from 'undici';
import type { TestServer } from './helpers/server.ts';

// yazl writes DOS dates in the process time zone; Sluice writes them in UTC. Compare like with like.
process.env.TZ = 'UTC';

/** The same archive built by yazl (STORED, given names and mtimes, mode 0644) and its predicted size. */
export async function yazlZip(files: Array<{ name: string; data: Buffer; mtime: Date }>): Promise<{ bytes: Buffer; finalSize: number }> {
  const yazl = createRequire(import.meta.url)('yazl') as { ZipFile: new () => ZipFile };
  const z = new yazl.ZipFile();
  for (const f of files) z.addBuffer(f.data, f.name, { compress: false, mtime: f.mtime, mode: 0o100644 });
  const chunks: Buffer[] = [];
  z.outputStream.on('data', (c: Buffer) => chunks.push(c));
  const ended = new Promise<void>((resolve, reject) => {
    z.outputStream.on('end', resolve);
    z.on('error', reject);
  });
  let finalSize = -1;
  z.end(undefined, ((n: number) => (finalSize = n)) as unknown as () => void);
  await ended;
  return { bytes: Buffer.concat(chunks), finalSize };
}

const PY_CHECK = `
import sys, zipfile, json
with zipfile.ZipFile(sys.argv[1]) as z:
    bad = z.testzip() if sys.argv[2] == 'test' else None
    print(json.dumps({'bad': bad, 'entries': [[i.filename, i.file_size, i.header_offset] for i in z.infolist()],
                      'read': {n: len(z.read(n)) for n in sys.argv[3:]}}))
`;

/**
 * Python's zipfile on an archive file: `test` CRC-checks every entry, `list` only reads the central
 * directory (and reads the named entries). Undefined when python3 is not installed.
 */
export function pythonZip(file: string, mode: 'test' | 'list', read: string[] = []): { bad: string | null; entries: Array<[string, number, number]>; read: Record<string, number> } | undefined {
  const r = spawnSync('python3', ['-c', PY_CHECK, file, mode, ...read], { encoding: 'utf8' });
  if (r.error) return undefined;
  assert.equal(r.status, 0, `python3 zipfile failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as ReturnType<typeof pythonZip> & object;
}

/** `unzip -tq` (CRC test) exit status and output; undefined when unzip is not installed. */
export function unzipTest(file: string): { status: number; out: string } | undefined {
  const r = spawnSync('unzip', ['-tq', file], { encoding: 'utf8' });
  if (r.error) return undefined;
  return { status: r.status ?? -1, out: `${r.stdout}${r.stderr}` };
}

export interface Upload {
  short_code: string;
  upload_token: string;
  files: Array<{ id: number; name: string; size: number }>;
}
export type Headers = Record<string, string | string[] | undefined>;

export const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
export const hdr = (h: Headers, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v.join(', ') : v;
};


export async function get(srv: TestServer, urlPath: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET') {
  const res = await request(`${srv.url}${urlPath}`, { method, headers });
  return { status: res.statusCode, headers: res.headers as Headers, body: Buffer.from(await res.body.arrayBuffer()) };
}

export function assertNotFound(r: { status: number; headers: Headers; body: Buffer }, what: string): void {
  assert.equal(r.status, 404, `${what}: ${r.body.toString()}`);
  assert.match(hdr(r.headers, 'content-type') ?? '', /^application\/json/);
  const json = JSON.parse(r.body.toString()) as { success: unknown; error: unknown };
  assert.equal(json.success, false);
  assert.equal(typeof json.error, 'string');
}

/** Stored names and creation times of a bundle's files, in upload order (what the archive derives from). */
export async function storedFiles(srv: TestServer, code: string): Promise<Array<{ name: string; created_at: Date }>> {
  return srv.sql<Array<{ name: string; created_at: Date }>>`
    select f.name, f.created_at from files f join bundles b on b.id = f.bundle_id where b.short_code = ${code} order by f.seq`;
}

/** Fds the server holds open on stored files. */
export function openStoredFds(srv: TestServer): number {
  const dir = `/proc/${srv.proc.pid}/fd`;
  const files = path.join(srv.dataDir, 'files');
  return fs.readdirSync(dir).filter((fd) => {
    try {
      return fs.readlinkSync(path.join(dir, fd)).startsWith(files);
    } catch {
      return false;
    }
  }).length;
}

