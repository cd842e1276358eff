import { createRequire } from 'node:module';
import type * as UwsTypes from 'uwebsockets';

export type Uws = typeof UwsTypes;
export type HttpResponse = UwsTypes.HttpResponse;
export type HttpRequest = UwsTypes.HttpRequest;
export type TemplatedApp = UwsTypes.TemplatedApp;
export type ListenSocket = UwsTypes.us_listen_socket;

export interface UwsBinding {
  readonly uws: Uws;
  /** npm package that supplied the native binary, and its version. */
  readonly name: string;
  readonly version: string;
  /** Known limits of this binding's parser, for operators (none for the one loaded today). */
  readonly limits: readonly string[];
}

const require = createRequire(import.meta.url);

/**
 * The one binding: uWebSockets.js binaries republished on npm as `uwebsockets` (pinned exactly in
 * package.json). Its Linux binaries need glibc 2.27 for Node 16–21 and 2.38 for Node 22 and later;
 * it parses any Content-Length. docs/platform.md says why this package and what was checked.
 */
const PACKAGE = 'uwebsockets';

/** True only for a real native App, never a JavaScript stand-in that some republications fall back to. */
export const isNative = (fn: unknown): boolean =>
  typeof fn === 'function' && Function.prototype.toString.call(fn).includes('[native code]');

/** Loads the native uWebSockets.js binding. Throws, saying why, rather than ever running on a JS fallback. */
export function loadUws(): UwsBinding {
  let mod: Uws;
  let version: string;
  try {
    mod = require(PACKAGE) as Uws;
    version = (require(`${PACKAGE}/package.json`) as { version: string }).version;
  } catch (err) {
    throw new Error(
      `the uWebSockets.js binding (${PACKAGE}) does not load on this platform (Node ${process.version}, ` +
        `${process.platform}-${process.arch}${glibc()}): ${firstLine(err)}. See docs/platform.md for the supported systems.`,
      { cause: err },
    );
  }
  if (!isNative(mod.App)) {
    throw new Error(`${PACKAGE}: App is not the native binary (a JavaScript stand-in); refusing to start on it`);
  }
  return { uws: mod, name: PACKAGE, version, limits: [] };
}

function glibc(): string {
  const header = process.report?.getReport?.() as { header?: { glibcVersionRuntime?: string } } | undefined;
  const v = header?.header?.glibcVersionRuntime;
  return v ? `, glibc ${v}` : '';
}

function firstLine(err: unknown): string {
  // The package's own message starts with its list of supported Node versions; the loader's error follows it.
  const text = String(err instanceof Error ? err.message : err);
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  return lines.slice(0, 2).join(' ').slice(0, 400);
}
