import fs from 'node:fs';
import path from 'node:path';

/**
 * Everything this process creates is owner-only: stored files, the secret, mail, the embedded
 * database. Set before anything is written.
 */
export const OWNER_ONLY_UMASK = 0o077;

/**
 * DATA_DIR exists (made if missing, owner-only) as a writable directory that no other user can
 * write into, or start-up stops with one line saying what to do: another local user able to write
 * there could replace stored files or the embedded database's (a bundle's password hash among them).
 */
export function usableDataDir(dir: string): void {
  let st: fs.Stats;
  try {
    makeDir(dir);
    st = fs.statSync(dir);
    if (!st.isDirectory()) throw new Error('not a directory');
    fs.accessSync(dir, fs.constants.W_OK);
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'EEXIST' ? 'not a directory' : (err as Error).message;
    throw new Error(`DATA_DIR ${dir}: ${why}`, { cause: err });
  }
  if ((st.mode & 0o022) !== 0) {
    const mode = (st.mode & 0o7777).toString(8).padStart(4, '0');
    throw new Error(`DATA_DIR ${dir}: other users can write to it (mode ${mode}); run chmod 700 ${dir}, or point DATA_DIR elsewhere`);
  }
}

/**
 * Makes `dir` and its missing parents (0700), one level at a time. Not `mkdir -p`: Node's recursive
 * mkdir retries forever, on the main thread, where a directory cannot be made but its parent exists
 * (/proc/sluice), so start-up would hang deaf to signals. Here such a directory fails with its errno.
 */
export function makeDir(dir: string): void {
  const missing: string[] = [];
  for (let p = path.resolve(dir); !fs.existsSync(p); p = path.dirname(p)) {
    missing.push(p);
    if (path.dirname(p) === p) break;
  }
  for (const p of missing.reverse()) {
    try {
      fs.mkdirSync(p, { mode: 0o700 });
    } catch (err) {
      // Made meanwhile by another process of this server: fine.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}

/**
 * Makes a directory tree owner-only: directories 0700, files 0600. The embedded database writes its
 * files 0666 whatever the umask (its file system layer sets the mode itself); its directory being
 * 0700 is what keeps later ones private, and this corrects the files already there.
 */
export function restrictTree(root: string): void {
  const walk = (p: string): void => {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(p);
    } catch {
      return; // gone meanwhile
    }
    if (st.isSymbolicLink()) return;
    if (st.isDirectory()) {
      if ((st.mode & 0o777) !== 0o700) fs.chmodSync(p, 0o700);
      for (const name of fs.readdirSync(p)) walk(path.join(p, name));
    } else if ((st.mode & 0o077) !== 0) {
      fs.chmodSync(p, st.mode & 0o700);
    }
  };
  walk(root);
}

/**
 * The directories Sluice writes in under DATA_DIR must be its own, or another local user could swap a
 * stored file for a link to something else (DATA_DIR's own mode does not cover a subdirectory made
 * writable). Walks `dir` and its subdirectories `depth` levels down: a symbolic link, or a directory
 * of another user, stops start-up naming it; a directory of ours that others may write is made
 * owner-only. Returns how many were repaired.
 */
export function ownedDirs(dir: string, depth: number): number {
  const uid = process.getuid?.();
  let repaired = 0;
  const walk = (p: string, left: number): void => {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(p);
    } catch {
      return; // not made yet: it will be made owner-only
    }
    if (st.isSymbolicLink()) throw new Error(`${p} is a symbolic link: Sluice keeps files only in directories of its own; remove the link`);
    if (!st.isDirectory()) throw new Error(`${p} is not a directory: move it away`);
    if (uid !== undefined && st.uid !== uid) {
      throw new Error(`${p} belongs to uid ${st.uid}, not to the user Sluice runs as (uid ${uid}): another user could replace files in it; chown -R it, or point DATA_DIR elsewhere`);
    }
    if ((st.mode & 0o077) !== 0) {
      fs.chmodSync(p, 0o700);
      repaired++;
    }
    if (left > 0) for (const e of fs.readdirSync(p, { withFileTypes: true })) if (!e.isFile()) walk(path.join(p, e.name), left - 1);
  };
  walk(dir, depth);
  return repaired;
}
