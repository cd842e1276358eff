/**
 * The blob-store contract (helpers/storage-contract.ts) on the disk store: with O_DIRECT where the
 * filesystem takes it, and through the page cache. Faults are injected by wrapping node:fs's
 * write/open (what the store's writers call): short writes, EIO, a refused O_DIRECT. ENOSPC is
 * real: a 32 MiB tmpfs mounted for the test (root with CAP_SYS_ADMIN; skipped loudly otherwise).
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createDiskStore, type DiskStore } from '../src/storage/disk/store.ts';
import { createHasher } from '../src/storage/hasher.ts';
import { spawnReadyChild, storageContract, type StoreUnderTest } from './helpers/storage-contract.ts';
import { mountTmpfs } from './helpers/services.ts';

/** Every file under the data directory (the store's objects, temp parts, resumables and cache). */
async function filesUnder(dir: string): Promise<string[]> {
  const all = (await fsp.readdir(dir, { recursive: true }).catch(() => [] as string[])) as string[];
  const out: string[] = [];
  for (const rel of all) if ((await fsp.stat(path.join(dir, rel)).catch(() => null))?.isFile()) out.push(rel);
  return out.sort();
}

async function diskUnderTest(dir: string, direct: boolean, removeDir?: () => void): Promise<StoreUnderTest> {
  const hasher = createHasher(1);
  const store = await createDiskStore(dir, hasher, { direct });
  return {
    store,
    residue: () => filesUnder(dir),
    async cleanup() {
      await hasher.close();
      if (removeDir) removeDir();
      else await fsp.rm(dir, { recursive: true, force: true });
    },
  };
}

type Write = typeof fs.write;
/** Replaces fs.write (callback form, as the store calls it) until the returned function runs. */
function wrapWrite(wrap: (orig: Write) => Write): () => void {
  const orig = fs.write;
  (fs as { write: unknown }).write = wrap(orig);
  return () => {
    (fs as { write: unknown }).write = orig;
  };
}

for (const direct of [true, false]) {
  const dataDir = (): string => fs.mkdtempSync(path.join(os.tmpdir(), 'sl-contract-'));
  storageContract({
    name: `disk (${direct ? 'O_DIRECT where supported' : 'page cache'})`,
    create: () => diskUnderTest(dataDir(), direct),
    async full() {
      const mount = mountTmpfs(32);
      if (!mount) return null;
      return { ...(await diskUnderTest(mount.dir, direct, () => mount.unmount())), room: 32 << 20 };
    },
    shortWrites: () =>
      wrapWrite((orig) => ((fd: number, buf: Buffer, off: number, len: number, pos: number, cb: (e: Error | null, n: number) => void) =>
        // Half of every write lands (a whole block at least, as a direct write stops on one).
        orig(fd, buf, off, len > 8192 ? Math.floor(len / 2 / 4096) * 4096 : len, pos, cb)) as unknown as Write),
    failWrites: (code) =>
      wrapWrite(() => ((...args: unknown[]) => {
        const cb = args[args.length - 1] as (e: Error) => void;
        process.nextTick(cb, Object.assign(new Error(`${code}: injected`), { code }));
      }) as unknown as Write),
    refuseDirect() {
      const orig = fs.open;
      const openFn = (p: string, flags: number, ...rest: unknown[]): void => {
        const cb = rest[rest.length - 1] as (e: Error | null) => void;
        if (typeof flags === 'number' && flags & fs.constants.O_DIRECT) {
          // Linux creates the file before refusing the flag.
          fs.closeSync(fs.openSync(p, 'a'));
          return process.nextTick(cb, Object.assign(new Error('EINVAL: injected'), { code: 'EINVAL' }));
        }
        (orig as (...a: unknown[]) => void)(p, flags, ...rest);
      };
      (fs as { open: unknown }).open = openFn;
      const origP = fsp.open;
      (fsp as { open: unknown }).open = (p: string, flags: number, mode?: number) =>
        typeof flags === 'number' && flags & fs.constants.O_DIRECT
          ? Promise.reject(Object.assign(new Error('EINVAL: injected'), { code: 'EINVAL' }))
          : origP(p, flags, mode);
      return () => {
        (fs as { open: unknown }).open = orig;
        (fsp as { open: unknown }).open = origP;
      };
    },
    spawnChild(sut, args) {
      const dir = path.dirname((sut.store as DiskStore).layout.filesDir);
      return spawnReadyChild('storage-child.ts', [args[0]!, dir, ...args.slice(1)]);
    },
  });
}
