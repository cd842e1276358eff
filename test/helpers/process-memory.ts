import { createHash } from 'node:crypto';
import fs from 'node:fs';

/** SHA-256 of a file, streamed. */
export async function hashFile(file: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of fs.createReadStream(file, { highWaterMark: 4 << 20 })) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** Resident memory of the renderer processes (pages, service workers) of browsers this process started, from /proc. */
export function renderersRss(ancestor: number): number {
  const parent = new Map<number, number>();
  for (const p of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
      parent.set(Number(p), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const descends = (pid: number): boolean => {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === ancestor) return true;
    return false;
  };
  let sum = 0;
  for (const pid of parent.keys()) {
    if (!descends(pid)) continue;
    try {
      if (!fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--type=renderer')) continue;
      const rss = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
      sum += Number(rss?.[1] ?? 0) * 1024;
    } catch {
      // gone meanwhile
    }
  }
  return sum;
}
