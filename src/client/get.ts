// `sluice get`: a bundle's files (or its zip) into a folder. Each file is fetched into a part file
// named by its id, resumed on the next run, checked against the listed size, then decrypted (when
// the link carries the key) or renamed to its real name. Names from the server or from an encrypted
// manifest are cleaned to a bare file name: nothing is written outside the folder.
import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { call } from './http.ts';
import { ClientFailure, EXIT, failureOf } from './failure.ts';
import { openBundle, type Opened, type RemoteFile } from './bundle-access.ts';
import { fetchWhole } from './download.ts';
import { decryptText, decryptToFile } from './age-files.ts';
import { createProgress, type Progress } from './progress.ts';
import { interruption, type Interruption } from './interrupt.ts';
import { MANIFEST_MAX, MANIFEST_NAME, parseManifest, type ManifestEntry } from '../util/age-manifest.ts';
import { cleanFileName } from '../util/names.ts';

export interface GetOptions {
  readonly dir: string;
  readonly zip: boolean;
  readonly passwordFile: string | null;
  readonly key: string | null;
  readonly out: NodeJS.WriteStream;
}

interface Wanted {
  readonly file: RemoteFile;
  /** Where it ends up. */
  readonly dest: string;
  /** The plaintext's size, when known (a decrypted file's, from the manifest). */
  readonly finalSize: number | null;
  readonly decrypt: boolean;
}

/** Downloads the bundle; resolves with the paths written. */
export async function get(link: string, o: GetOptions): Promise<string[]> {
  const b = await openBundle(link, { passwordFile: o.passwordFile, key: o.key });
  fs.mkdirSync(o.dir, { recursive: true });
  const stop = interruption();
  try {
    if (o.zip) return [await getZip(b, o, stop)];
    const wanted = await plan(b, o.dir);
    const todo = wanted.filter((w) => !alreadyHere(w));
    const progress = createProgress({ total: todo.reduce((n, w) => n + w.file.size, 0), out: o.out, verb: 'got' });
    try {
      for (const w of todo) await getOne(b, w, o.dir, progress, stop);
    } finally {
      progress.end();
    }
    return wanted.map((w) => w.dest);
  } finally {
    stop.close();
  }
}

/** The files to write and their local names: the manifest's names when the link opens it. */
async function plan(b: Opened, dir: string): Promise<Wanted[]> {
  const { info, identity } = b;
  const decrypt = info.is_encrypted && identity !== null;
  let byStored = new Map<string, ManifestEntry>();
  let files = info.files;
  if (decrypt) {
    const row = files.find((f) => f.name === MANIFEST_NAME && f.size <= MANIFEST_MAX);
    if (row) {
      const res = await call(`${b.origin}/d/${row.id}`, { headers: b.headers }, 'getting the file list');
      if (!res.ok) throw failureOf(res.status, await res.text(), res.headers.get('retry-after'), 'getting the file list');
      const text = await decryptText(new Uint8Array(await res.arrayBuffer()), identity).catch((err: Error) => {
        throw new ClientFailure(EXIT.MISMATCH, `the link's key does not open this bundle (${err.message})`);
      });
      byStored = new Map((parseManifest(text)?.files ?? []).map((f) => [f.stored, f]));
      files = files.filter((f) => f !== row);
    }
  }
  const used = new Set<string>();
  return files.map((file) => {
    const entry = byStored.get(file.name);
    let name = cleanFileName(entry?.name ?? (decrypt ? file.name.replace(/\.age$/, '') : file.name));
    // Two files of one name: the later one is told apart by its id, the same on every run.
    if (used.has(name)) name = name.replace(/(\.[^.]*)?$/, ` (${file.id})$1`);
    used.add(name);
    return { file, dest: path.join(dir, name), finalSize: decrypt ? (entry?.size ?? null) : file.size, decrypt };
  });
}

/** True when `dest` holds the file already (an earlier run); a different file there is never overwritten. */
function alreadyHere(w: Wanted): boolean {
  let size: number;
  try {
    size = fs.statSync(w.dest).size;
  } catch {
    return false;
  }
  if (w.finalSize === null || size === w.finalSize) return true;
  throw new ClientFailure(EXIT.USAGE, `${w.dest} exists and is not the bundle's ${path.basename(w.dest)}: move it away or choose another -o`);
}

async function getOne(b: Opened, w: Wanted, dir: string, progress: Progress, stop: Interruption): Promise<void> {
  const label = path.basename(w.dest);
  const part = path.join(dir, `.sluice-${w.file.id}.part`);
  progress.file(label, w.file.size, 0);
  await fetchWhole({ url: `${b.origin}/d/${w.file.id}`, part, size: w.file.size, headers: b.headers, etag: null, label, progress: (n) => progress.at(n), stop });
  if (w.decrypt) {
    await decryptToFile(part, w.dest, b.identity!, label);
    const got = fs.statSync(w.dest).size;
    if (w.finalSize !== null && got !== w.finalSize) {
      fs.rmSync(w.dest);
      throw new ClientFailure(EXIT.MISMATCH, `${label}: decrypted to ${got} bytes where the file list says ${w.finalSize}`);
    }
    fs.rmSync(part);
  } else {
    fs.renameSync(part, w.dest);
  }
  progress.fileDone();
}

/** The bundle's zip, resumed with If-Range: a zip of a bundle that changed since is fetched whole. */
async function getZip(b: Opened, o: GetOptions, stop: Interruption): Promise<string> {
  if (b.info.is_encrypted) throw new ClientFailure(EXIT.USAGE, 'an encrypted bundle\'s zip holds only ciphertext: leave out --zip to get its files decrypted');
  const url = `${b.origin}/zip/${b.info.short_code}`;
  const head = await call(url, { method: 'HEAD', headers: b.headers }, 'getting the zip');
  if (!head.ok) throw failureOf(head.status, '', head.headers.get('retry-after'), 'getting the zip');
  const size = Number(head.headers.get('content-length'));
  const etag = head.headers.get('etag');
  const dest = path.join(o.dir, `${b.info.short_code}.zip`);
  const tag = createHash('sha256').update(etag ?? String(size)).digest('hex').slice(0, 12);
  const part = path.join(o.dir, `.sluice-${b.info.short_code}-${tag}.zip.part`);
  const progress = createProgress({ total: size, out: o.out, verb: 'got' });
  try {
    progress.file(path.basename(dest), size, 0);
    await fetchWhole({ url, part, size, headers: b.headers, etag, label: path.basename(dest), progress: (n) => progress.at(n), stop });
    fs.renameSync(part, dest);
    progress.fileDone();
  } finally {
    progress.end();
  }
  return dest;
}

