import fs from 'node:fs';
import { createHash } from 'node:crypto';
import { randomHex } from './random.ts';

/**
 * A process's identity beyond its pid. Pids are reused: in a container the server is pid 1 at every
 * start, and after a reboot an old pid may belong to anything. Files that name their writer (upload
 * parts, the embedded database's lock) carry the pid and this tag, a digest of the boot id and the
 * process's start time (/proc), so a leftover of a crashed writer is told from a live writer's file
 * even when the pid is alive again. Without /proc the tag is random per process and only a process's
 * own tag is known: another pid falls back to "alive if the pid is".
 */
const BOOT_ID = readOr('/proc/sys/kernel/random/boot_id', '').trim();

function readOr(file: string, fallback: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return fallback;
  }
}

/** The tag of the process running as `pid` now; null when there is none (or no /proc to tell). */
export function startTag(pid: number): string | null {
  const stat = readOr(`/proc/${pid}/stat`, '');
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so fields count from the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const startTime = fields[19]; // field 22 of proc_pid_stat(5)
  if (BOOT_ID === '' || startTime === undefined || !/^\d+$/.test(startTime)) return null;
  return createHash('sha256').update(`${BOOT_ID}:${startTime}`).digest('hex').slice(0, 8);
}

export const ownTag: string = startTag(process.pid) ?? randomHex(4);

/** Whether `pid` runs at all (alone: for names written before tags, which carry the pid only). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Whether the process that wrote `tag` beside `pid` may still run: false only when that is known,
 * (the pid is gone, or it runs with another start), never when /proc cannot show it (hidepid, no
 * /proc): a live writer's part must never be taken for a leftover.
 */
export function writerAlive(pid: number, tag: string): boolean {
  if (pid === process.pid) return tag === ownTag;
  if (!isAlive(pid)) return false;
  const now = startTag(pid);
  return now === null || now === tag;
}
