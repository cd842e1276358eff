import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';

/**
 * How PostgreSQL runs, since it refuses to run as root. For root, preferably in a user namespace
 * where it has a non-zero uid that is root outside (`unshare`): it then reaches a DATA_DIR anywhere
 * root can, such as a checkout under /root, and its files stay root's. Where namespaces are not
 * allowed, as user `nobody`, which needs DATA_DIR's parents to be passable.
 */
export type DbUser =
  | { readonly mode: 'namespace'; readonly prefix: readonly string[] }
  | { readonly mode: 'nobody'; readonly uid: number; readonly gid: number };

let chosen: DbUser | null | undefined;

export function dbUser(): DbUser | null {
  if (chosen !== undefined) return chosen;
  if (process.getuid?.() !== 0) return (chosen = null);
  const line = fs.readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith('nobody:'));
  const [, , uid, gid] = line?.split(':') ?? [];
  if (uid === undefined || gid === undefined) {
    throw new Error('running as root, and there is no user "nobody" to run the embedded PostgreSQL as: run sluice as an ordinary user');
  }
  // initdb looks its user up by uid, so the namespace's uid is one /etc/passwd names.
  const prefix = ['unshare', '--user', `--map-user=${uid}`, `--map-group=${gid}`, '--'];
  const probe = spawnSync(prefix[0]!, [...prefix.slice(1), 'true'], { stdio: 'ignore', timeout: 5000 });
  if (probe.status === 0) return (chosen = { mode: 'namespace', prefix });
  return (chosen = { mode: 'nobody', uid: Number(uid), gid: Number(gid) });
}

/** spawn() arguments that run `cmd` as the database's user. */
export function asDbUser(user: DbUser | null, cmd: string, args: readonly string[]): { cmd: string; args: string[]; ids: { uid?: number; gid?: number } } {
  if (user?.mode === 'namespace') return { cmd: user.prefix[0]!, args: [...user.prefix.slice(1), cmd, ...args], ids: {} };
  return { cmd, args: [...args], ids: user ? { uid: user.uid, gid: user.gid } : {} };
}

export function canTraverse(dir: string): boolean {
  for (let d = dir; ; d = path.dirname(d)) {
    if ((fs.statSync(d).mode & 0o001) === 0) return false;
    if (d === path.dirname(d)) return true;
  }
}

/** A cluster made by another user (an unprivileged run, or root's other mode): hand its files to the one that runs it now. */
export function fixOwner(dir: string, user: { uid: number; gid: number }): void {
  if (fs.statSync(dir).uid === user.uid) return;
  const walk = (p: string): void => {
    fs.lchownSync(p, user.uid, user.gid);
    if (fs.lstatSync(p).isDirectory()) for (const n of fs.readdirSync(p)) walk(path.join(p, n));
  };
  walk(dir);
}
