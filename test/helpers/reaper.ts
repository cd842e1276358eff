import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * Every process a test run starts carries this variable, set to the pid of the run's test/run.ts:
 * servers, Ceph daemons (which detach into their own session), clamd, Redis. So what a run left
 * behind can be found from /proc whatever its parent is now, and stopped.
 */
export const RUN_VAR = 'SLUICE_TEST_RUN';

/** The variable for an environment a helper builds itself (a server's), when this process belongs to a run. */
export function runTag(): Record<string, string> {
  const run = process.env[RUN_VAR];
  return run ? { [RUN_VAR]: run } : {};
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !/^State:\s*Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Processes that carry RUN_VAR, each with the run it belongs to. */
function tagged(): Array<{ pid: number; run: number }> {
  const found: Array<{ pid: number; run: number }> = [];
  const prefix = `${RUN_VAR}=`;
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    let environ: string;
    try {
      environ = fs.readFileSync(`/proc/${entry}/environ`, 'latin1');
    } catch {
      continue; // gone, or another user's
    }
    const v = environ.split('\0').find((e) => e.startsWith(prefix));
    if (v) found.push({ pid: Number(entry), run: Number(v.slice(prefix.length)) });
  }
  return found;
}

/** SIGKILLs the tagged processes of the runs `which` picks; returns how many. */
export function reap(which: (run: number) => boolean): number {
  let n = 0;
  for (const t of tagged()) {
    if (!which(t.run)) continue;
    try {
      process.kill(t.pid, 'SIGKILL');
      n++;
    } catch {
      // gone meanwhile
    }
  }
  return n;
}

/** Marks a temp directory as this run's (see reapDirs). */
export function ownDir(dir: string): void {
  fs.writeFileSync(path.join(dir, '.sluice-run'), process.env[RUN_VAR] ?? String(process.pid));
}

/** Removes marked temp directories (named `prefix`*) whose run has ended; returns how many. */
export function reapDirs(prefix: string): number {
  let n = 0;
  for (const name of fs.readdirSync(os.tmpdir())) {
    if (!name.startsWith(prefix)) continue;
    const dir = path.join(os.tmpdir(), name);
    let owner: number;
    try {
      owner = Number(fs.readFileSync(path.join(dir, '.sluice-run'), 'utf8'));
    } catch {
      continue;
    }
    if (alive(owner)) continue;
    fs.rmSync(dir, { recursive: true, force: true });
    n++;
  }
  return n;
}
