import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Ctx } from '../http/context.ts';
import { endHead, send, writeHead } from '../http/reply.ts';
import { fromRoot } from '../paths.ts';

interface Asset {
  /** Built on the first request for a bundle (see clientBundles). */
  readonly body: Buffer | (() => Promise<Buffer>);
  readonly type: string;
  /** First 16 hex digits of the SHA-256: the `?v=` cache buster. */
  readonly version: string;
  readonly etag: string;
}

export interface Assets {
  /** `/static/<name>?v=<hash>`: cacheable forever, since the hash changes with the bytes. */
  url(name: string): string;
  /** GET|HEAD /static/:name */
  serve(ctx: Ctx): void | Promise<void>;
}

const TYPES: Record<string, string> = {
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

const STATIC_DIR = fromRoot('src/web/static');
const CLIENT_DIR = fromRoot('src/web/client');

/** Browser code written in TypeScript, bundled by esbuild: served name → entry point. */
const BUNDLES: Record<string, string> = {
  'age.js': 'age-page.ts',
  'age-sw.js': 'age-sw.ts',
};

let bundled: Promise<Map<string, Buffer>> | null = null;

/**
 * The bundles, built in memory on first use, once per process (a fraction of a second; nothing is
 * written, so a read-only install serves them too). IIFE scripts without eval: fine under
 * script-src 'self'. esbuild's helper process is stopped after the build; a failed build is tried
 * again on the next request.
 */
function clientBundles(): Promise<Map<string, Buffer>> {
  bundled ??= (async () => {
    // esbuild is loaded on the first request for a bundle, not at start.
    const { build, stop } = await import('esbuild');
    try {
      const out = await build({
        entryPoints: Object.fromEntries(Object.entries(BUNDLES).map(([name, entry]) => [name.replace(/\.js$/, ''), path.join(CLIENT_DIR, entry)])),
        outdir: '/',
        bundle: true,
        write: false,
        format: 'iife',
        platform: 'browser',
        target: 'es2022',
        minify: true,
        legalComments: 'none',
        logLevel: 'error',
      });
      return new Map(out.outputFiles.map((f) => [path.basename(f.path), Buffer.from(f.contents)]));
    } catch (err) {
      bundled = null;
      throw err;
    } finally {
      await stop();
    }
  })();
  return bundled;
}

/**
 * The bundles' version without building them: a digest of their sources and of the versions of the
 * packages they include, so pages can name `?v=` before anyone asks for the script.
 */
function clientVersion(): string {
  const h = createHash('sha256');
  for (const name of readdirSync(CLIENT_DIR).sort()) h.update(name).update(readFileSync(path.join(CLIENT_DIR, name)));
  const require = createRequire(import.meta.url);
  for (const pkg of ['age-encryption', 'client-zip', 'esbuild']) {
    const dir = packageDir(require.resolve(pkg));
    h.update(pkg).update(readFileSync(path.join(dir, 'package.json')));
  }
  return h.digest('hex');
}

function packageDir(file: string): string {
  let dir = path.dirname(file);
  while (!existsSync(path.join(dir, 'package.json'))) dir = path.dirname(dir);
  return dir;
}

/** The service worker lives in /static/ but answers /e2e/ (the share page's decrypted downloads). */
const EXTRA_HEADERS: Record<string, Array<[string, string]>> = {
  'age-sw.js': [['Service-Worker-Allowed', '/e2e/']],
};

/**
 * Loads every static file once (they are a few kilobytes) plus the browser builds of the QR code
 * library (global `qrcode`), tus-js-client (global `tus`, ~85 KB, no eval: fine under
 * script-src 'self'), uPlot for the console's charts (global `uPlot`, ~50 KB, no eval; it styles
 * elements through the CSSOM, which style-src 'self' allows) and the bundles of src/web/client.
 * Nothing is read from disk per request.
 */
export function loadAssets(dir = STATIC_DIR): Assets {
  const files = new Map<string, Buffer>();
  for (const name of readdirSync(dir)) {
    if (TYPES[path.extname(name)] !== undefined) files.set(name, readFileSync(path.join(dir, name)));
  }
  // The package's "require" export is dist/qrcode.js: a plain script, not an ES module.
  const qrPath = createRequire(import.meta.url).resolve('qrcode-generator');
  files.set('qrcode.js', readFileSync(qrPath));
  // The package's main entry is lib.es5/node/index.js; its UMD browser build sits in dist/. The
  // source-map comment goes: the map is not served, and devtools would log a 404 for it.
  const tusPath = path.join(path.dirname(createRequire(import.meta.url).resolve('tus-js-client')), '../../dist/tus.min.js');
  files.set('tus.js', Buffer.from(readFileSync(tusPath, 'utf8').replace(/\n?\/\/# sourceMappingURL=\S+\s*$/, '\n')));
  // Its main entry is the CommonJS build; the browser script and the stylesheet sit beside it in dist/.
  const uplotDir = packageDir(createRequire(import.meta.url).resolve('uplot'));
  files.set('uplot.js', readFileSync(path.join(uplotDir, 'dist/uPlot.iife.min.js')));
  files.set('uplot.css', readFileSync(path.join(uplotDir, 'dist/uPlot.min.css')));

  const assets = new Map<string, Asset>();
  for (const [name, body] of files) {
    const hex = createHash('sha256').update(body).digest('hex');
    assets.set(name, { body, type: TYPES[path.extname(name)]!, version: hex.slice(0, 16), etag: `"${hex}"` });
  }
  const client = clientVersion();
  for (const name of Object.keys(BUNDLES)) {
    const hex = createHash('sha256').update(client).update(name).digest('hex');
    assets.set(name, { body: async () => (await clientBundles()).get(name)!, type: TYPES['.js']!, version: hex.slice(0, 16), etag: `"${hex}"` });
  }

  return {
    url(name) {
      const a = assets.get(name);
      if (!a) throw new Error(`unknown static asset ${name}`);
      return `/static/${name}?v=${a.version}`;
    },
    async serve(ctx) {
      const a = assets.get(ctx.params[0] ?? '');
      const base: Array<[string, string]> = [['X-Content-Type-Options', 'nosniff'], ...(EXTRA_HEADERS[ctx.params[0] ?? ''] ?? [])];
      if (!a) {
        send(ctx, 404, 'Not found', [...base, ['Content-Type', 'text/plain; charset=utf-8'], ['Cache-Control', 'no-cache']]);
        return;
      }
      // Only the current version may be cached forever: an old ?v= gets today's bytes, revalidated.
      const cache = ctx.query.get('v') === a.version ? 'public, max-age=31536000, immutable' : 'no-cache';
      const headers: Array<[string, string]> = [...base, ['ETag', a.etag], ['Cache-Control', cache]];
      if (matches(ctx.headers['if-none-match'], a.etag)) {
        if (ctx.done) return;
        ctx.done = true;
        ctx.res.cork(() => {
          writeHead(ctx, 304, headers);
          endHead(ctx, null);
        });
        return;
      }
      const body = typeof a.body === 'function' ? await a.body() : a.body;
      if (ctx.aborted) return;
      send(ctx, 200, body, [...headers, ['Content-Type', a.type]]);
    },
  };
}

function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  return ifNoneMatch.split(',').some((t) => {
    const tag = t.trim();
    return tag === '*' || tag.replace(/^W\//, '') === etag;
  });
}
