import type { Sql } from '../db/sql.ts';
import type { FileRow } from '../db/rows.ts';
import { filesFingerprint, listFilesInPages } from '../db/file-pages.ts';
import { createLimiter } from '../util/limit.ts';
import { entryNamer } from './names.ts';
import { LAYOUT_SLICE, zipLayoutSliced, type ZipEntry, type ZipLayout } from './layout.ts';

/** Everything a zip response of one bundle needs: its files in id order, their storage keys, its layout and its ETag. */
export interface ZipPlan {
  readonly files: readonly FileRow[];
  readonly keys: readonly string[];
  readonly layout: ZipLayout;
  readonly etag: string;
}

export interface ZipPlans {
  /** The plan of the bundle's current files: reused while they are the same, else built anew. */
  plan(bundleId: number): Promise<ZipPlan>;
}

/** Files in the plans kept, all bundles together (the most recently built are kept): a few MiB per thousand files. */
const KEPT_FILES = 20_000;

/**
 * Plans of zip responses, built at most one at a time per process and kept while the bundle's files
 * are unchanged: a flood of zip requests for a large bundle costs one build, not one per request,
 * and no build holds the event loop for long (rows are read in pages, the layout built in slices).
 * Files never change once stored and ids only grow, so the count and the largest id of a bundle's
 * files name the set: any deletion lowers the count, any addition raises the largest id.
 */
export function createZipPlans(deps: {
  sql: Sql;
  /** The archive's validator, fed every file in id order. */
  etag: () => { add(f: FileRow): void; digest(): string };
  /** The stored object of a file (its storage key). */
  keyOf: (f: FileRow) => string;
}): ZipPlans {
  const { sql, keyOf } = deps;
  const kept = new Map<number, { fingerprint: string; files: number; plan: Promise<ZipPlan> }>();
  // Builds queue here; a burst beyond the queue gets 503 rather than piling up.
  const builds = createLimiter({ max: 1, queue: 64 });

  const build = (bundleId: number): Promise<ZipPlan> =>
    builds.run(async () => {
      const files = await listFilesInPages(sql, bundleId, 'all');
      // Every per-file step runs in slices too: names, keys and the ETag of ten thousand files
      // are several milliseconds of work that would otherwise run in one go.
      const nameOf = entryNamer();
      const etag = deps.etag();
      const entries: ZipEntry[] = [];
      const keys: string[] = [];
      for (const [i, f] of files.entries()) {
        if (i > 0 && i % LAYOUT_SLICE === 0) await new Promise((r) => setImmediate(r));
        entries.push({ name: nameOf(f.name), size: f.size, crc32: f.crc32, mtime: f.created_at });
        keys.push(keyOf(f));
        etag.add(f);
      }
      const layout = await zipLayoutSliced(entries);
      return { files, keys, layout, etag: etag.digest() };
    });

  return {
    async plan(bundleId) {
      const row = await filesFingerprint(sql, bundleId);
      const files = row?.n ?? 0;
      const fingerprint = `${files}:${row?.last ?? 0}`;
      const hit = kept.get(bundleId);
      if (hit && hit.fingerprint === fingerprint) return hit.plan;
      const plan = build(bundleId);
      kept.delete(bundleId);
      kept.set(bundleId, { fingerprint, files, plan });
      let total = 0;
      for (const k of kept.values()) total += k.files;
      for (const [id, k] of kept) {
        if (total <= KEPT_FILES || id === bundleId) break;
        kept.delete(id);
        total -= k.files;
      }
      plan.catch(() => {
        if (kept.get(bundleId)?.plan === plan) kept.delete(bundleId);
      });
      return plan;
    },
  };
}
