// The files a `sluice send` names: each argument a file, or a folder whose files (all the way down,
// in name order) are sent; each goes up under its own name, without its folders.
import fs from 'node:fs/promises';
import path from 'node:path';
import { ClientFailure, EXIT } from './failure.ts';
import type { LocalFile } from './send-state.ts';

async function walk(dir: string, out: string[]): Promise<void> {
  const entries = await fs.readdir(dir, { withFileTypes: true });
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) await walk(p, out);
    else out.push(p);
  }
}

async function statOf(p: string): Promise<import('node:fs').Stats> {
  try {
    return await fs.stat(p);
  } catch {
    throw new ClientFailure(EXIT.USAGE, `no such file: ${p}`);
  }
}

export async function localFiles(args: readonly string[]): Promise<LocalFile[]> {
  const paths: string[] = [];
  for (const a of args) {
    const st = await statOf(a);
    if (st.isDirectory()) await walk(path.resolve(a), paths);
    else paths.push(path.resolve(a));
  }
  const out: LocalFile[] = [];
  for (const p of paths) {
    const st = await statOf(p);
    // A socket or a device has no size to announce; a link to a file is followed.
    if (!st.isFile()) continue;
    out.push({ path: p, name: path.basename(p), size: st.size, mtimeMs: st.mtimeMs });
  }
  if (out.length === 0) throw new ClientFailure(EXIT.USAGE, `nothing to send in ${args.join(' ')}`);
  return out;
}

/** The first line of a password file, without its line ending. */
export async function passwordFrom(file: string): Promise<string> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch {
    throw new ClientFailure(EXIT.USAGE, `cannot read the password file ${file}`);
  }
  const line = text.split(/\r?\n/)[0] ?? '';
  if (line === '') throw new ClientFailure(EXIT.USAGE, `the password file ${file} is empty`);
  return line;
}
