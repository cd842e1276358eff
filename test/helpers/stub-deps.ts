import type { Deps } from '../../src/deps.ts';

/**
 * A Deps stand-in for building route tables: route factories only close over deps (handlers are
 * never invoked here), but some read fields at build time, e.g. healthRoutes reads the binding.
 * Anything not given explicitly is a harmless callable proxy, so a new route module needs no edit here.
 */
export function stubDeps(): Deps {
  const anything: unknown = new Proxy(() => anything, { get: (_t, k) => (k === Symbol.toPrimitive ? () => '' : anything) });
  const given: Record<string, unknown> = {
    binding: { name: 'stub-uws', version: '0', limits: [] },
    dbKind: 'embedded',
    // Route modules may build paths at construction; they are never written to.
    disk: { cacheDir: '/nonexistent/sluice-stub-cache', filesDir: '/nonexistent', tmpDir: '/nonexistent' },
    config: { dataDir: '/nonexistent', baseUrl: 'http://localhost' },
  };
  return new Proxy(given, { get: (t, k) => (typeof k === 'string' && k in t ? t[k] : anything) }) as unknown as Deps;
}
