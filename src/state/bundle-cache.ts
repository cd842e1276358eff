import type { BundleRow, FileSummary } from '../db/rows.ts';

/** An active bundle, its files, and the bytes unfinished tus uploads have reserved in it. */
export type BundleInfo = BundleRow & { files: FileSummary[]; tus_reserved: number };

/**
 * Read-through cache of active bundles with their file lists, by short code: a share link that is
 * being hammered costs one query per TTL instead of one per request.
 *
 * It is only as fresh as what invalidates it, so it is used only where a change feed exists
 * (`Db.watchBundles`): a database trigger announces every change to a bundle, whoever makes it,
 * and the process that made a change also drops its copy itself before it answers. A read that
 * raced a change is never stored (the generation check), an expired bundle is never served (its
 * `expires_at` is checked on every hit), and the TTL bounds the damage of a missed announcement.
 * Bundles with a download limit are read through, never kept. Content paths (downloads, zips, previews) never use it: they always ask the database.
 */
export interface BundleCache {
  /** The active bundle with this code, from the cache or `load`; undefined when there is none. */
  get(code: string): Promise<BundleInfo | undefined>;
  /** Drops the bundle with this id; null drops everything (the change feed reconnected). */
  invalidate(bundleId: number | null): void;
  readonly size: number;
}

interface Entry {
  readonly bundle: BundleInfo;
  readonly storedAt: number;
  readonly weight: number;
}

export interface BundleCacheOptions {
  load: (code: string) => Promise<BundleInfo | undefined>;
  /** How long an entry may be served without an announcement; 0 disables the cache. */
  ttlMs: number;
  /** Bound on what is held: one unit per bundle plus one per listed file. */
  maxWeight: number;
  now?: () => number;
}

export function createBundleCache(opts: BundleCacheOptions): BundleCache {
  const now = opts.now ?? Date.now;
  const entries = new Map<string, Entry>();
  const codeOf = new Map<number, string>();
  /** Reads in flight, shared by concurrent misses of one code within one generation. */
  const loading = new Map<string, { gen: number; promise: Promise<BundleInfo | undefined> }>();
  let gen = 0;
  let weight = 0;

  const drop = (code: string): void => {
    const e = entries.get(code);
    if (!e) return;
    entries.delete(code);
    codeOf.delete(e.bundle.id);
    weight -= e.weight;
  };

  const store = (code: string, bundle: BundleInfo): void => {
    const w = 1 + bundle.files.length;
    if (w > opts.maxWeight / 4) return; // one huge bundle must not flush everything else
    drop(code);
    entries.set(code, { bundle, storedAt: now(), weight: w });
    codeOf.set(bundle.id, code);
    weight += w;
    // Oldest first: Map iteration is insertion order.
    for (const oldest of entries.keys()) {
      if (weight <= opts.maxWeight) break;
      drop(oldest);
    }
  };

  return {
    get size() {
      return entries.size;
    },
    async get(code) {
      if (opts.ttlMs <= 0) return opts.load(code);
      const e = entries.get(code);
      if (e) {
        const t = now();
        const expired = e.bundle.expires_at !== null && e.bundle.expires_at.getTime() <= t;
        if (!expired && t - e.storedAt < opts.ttlMs) return e.bundle;
        drop(code);
      }
      const inflight = loading.get(code);
      if (inflight && inflight.gen === gen) return inflight.promise;
      const startedAt = gen;
      const promise = opts.load(code).then(
        (bundle) => {
          if (loading.get(code)?.promise === promise) loading.delete(code);
          // Stored only if nothing changed while it was read: else it may predate the change. A
          // limited bundle is never stored: its counts change with each download on any node, and
          // an answer must never be older than the client's own last download.
          if (bundle && startedAt === gen && bundle.max_downloads === null) store(code, bundle);
          return bundle;
        },
        (err: unknown) => {
          if (loading.get(code)?.promise === promise) loading.delete(code);
          throw err;
        },
      );
      loading.set(code, { gen: startedAt, promise });
      return promise;
    },
    invalidate(bundleId) {
      gen++;
      if (bundleId === null) {
        entries.clear();
        codeOf.clear();
        weight = 0;
        return;
      }
      const code = codeOf.get(bundleId);
      if (code !== undefined) drop(code);
    },
  };
}
