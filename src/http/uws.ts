import { createRequire } from 'node:module';
import type * as UwsTypes from '@trufflesuite/uws-js-unofficial';

export type Uws = typeof UwsTypes;
export type HttpResponse = UwsTypes.HttpResponse;
export type HttpRequest = UwsTypes.HttpRequest;
export type TemplatedApp = UwsTypes.TemplatedApp;
export type ListenSocket = UwsTypes.us_listen_socket;

export interface UwsBinding {
  readonly uws: Uws;
  /** npm package that supplied the native binary. */
  readonly name: string;
  readonly version: string;
  /** Largest Content-Length the binding's parser accepts (chunked bodies are unbounded). */
  readonly maxContentLength: number;
  readonly limits: readonly string[];
}

const require = createRequire(import.meta.url);

const CANDIDATES = [
  {
    name: '@btc-vision/uwebsockets.js',
    version: '20.57',
    maxContentLength: Number.MAX_SAFE_INTEGER,
    limits: [],
  },
  {
    name: '@trufflesuite/uws-js-unofficial',
    version: '20.30',
    maxContentLength: 999_999_999,
    limits: [
      'requests with a Content-Length of 1e9 bytes or more are dropped by this parser; send larger bodies with Transfer-Encoding: chunked or use the resumable upload endpoint',
    ],
  },
] as const;

/** True only for the real native App: the trufflesuite package silently swaps in a slow JS emulation. */
export const isNative = (fn: unknown): boolean =>
  typeof fn === 'function' && Function.prototype.toString.call(fn).includes('[native code]');

/**
 * Loads the fastest uWebSockets.js binding that runs here. Throws, saying why, rather than
 * ever running on the pure-JS fallback.
 */
export function loadUws(): UwsBinding {
  const reasons: string[] = [];
  for (const c of CANDIDATES) {
    let mod: Uws;
    try {
      // The trufflesuite loader prints to stderr before falling back; the native check below catches that case.
      mod = require(c.name) as Uws;
    } catch (err) {
      reasons.push(`${c.name}: ${firstLine(err)}`);
      continue;
    }
    if (!isNative(mod.App)) {
      reasons.push(`${c.name}: native binary did not load (only the slow JS fallback is available)`);
      continue;
    }
    return { uws: mod, name: c.name, version: c.version, maxContentLength: c.maxContentLength, limits: c.limits };
  }
  throw new Error(
    `no native uWebSockets.js binding loads on this platform (Node ${process.version}, ${process.platform}-${process.arch}); ` +
      `refusing to start on a slow fallback. Tried: ${reasons.join('; ')}`,
  );
}

function firstLine(err: unknown): string {
  return String(err instanceof Error ? err.message : err).split('\n')[0]!.slice(0, 200);
}
