// What lets `sluice send` resume: one small JSON file per distinct command (server, options and the
// files as they are on disk), holding the bundle made so far and each file's tus upload URL. A
// re-run of the same command finds it and goes on; a finished send removes it.
import fs from 'node:fs/promises';
import path from 'node:path';
import { createHash } from 'node:crypto';

export interface LocalFile {
  readonly path: string;
  /** The name the bundle shows. */
  readonly name: string;
  readonly size: number;
  readonly mtimeMs: number;
}

export interface FileState {
  /** The tus upload of this file (or of its ciphertext), once created. */
  tusUrl: string | null;
  /** Set once the server holds the whole file. */
  fileId: number | null;
  /** Encrypted sends: the ciphertext is complete in the spool. */
  spooled: boolean;
}

export interface SendState {
  readonly v: 1;
  files: FileState[];
  /** From the first file's completion. */
  shareUrl: string | null;
  uploadToken: string | null;
  /** Encrypted sends: the bundle's age identity (the link's `#key=`) and recipient. */
  identity: string | null;
  recipient: string | null;
  manifest: FileState;
}

const fresh = (): FileState => ({ tusUrl: null, fileId: null, spooled: false });

export function newState(count: number): SendState {
  return {
    v: 1,
    files: Array.from({ length: count }, fresh),
    shareUrl: null,
    uploadToken: null,
    identity: null,
    recipient: null,
    manifest: fresh(),
  };
}

/** Where the state of the command described by `what` lives; `.d/` beside it holds its ciphertexts. */
export function stateFileFor(stateDir: string, what: unknown): string {
  const id = createHash('sha256').update(JSON.stringify(what)).digest('hex').slice(0, 32);
  return path.join(stateDir, 'sends', `${id}.json`);
}

export const spoolDirOf = (stateFile: string): string => stateFile.replace(/\.json$/, '.d');

export async function loadState(file: string, count: number): Promise<SendState | null> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  try {
    const st = JSON.parse(text) as SendState;
    return st.v === 1 && Array.isArray(st.files) && st.files.length === count ? st : null;
  } catch {
    return null; // A state cut short by a crash: start afresh.
  }
}

/** Writes the state whole (temp file, fsync, rename), readable by its owner only: it holds the upload token. */
export async function saveState(file: string, st: SendState): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  const h = await fs.open(tmp, 'w', 0o600);
  try {
    await h.writeFile(JSON.stringify(st));
    await h.sync();
  } finally {
    await h.close();
  }
  await fs.rename(tmp, file);
}

/** A writer that saves one state at a time, in the order asked (a save may be asked while one runs). */
export function stateWriter(file: string, st: SendState): () => Promise<void> {
  let last: Promise<void> = Promise.resolve();
  return () => (last = last.catch(() => {}).then(() => saveState(file, st)));
}

export async function dropState(file: string): Promise<void> {
  await fs.rm(spoolDirOf(file), { recursive: true, force: true });
  await fs.rm(file, { force: true });
}
