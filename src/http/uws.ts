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
    const found = glibc();
    throw new Error(
      `the uWebSockets.js binding (${PACKAGE}) does not load on this platform (Node ${process.version}, ` +
        `${process.platform}-${process.arch}${found ? `, glibc ${found}` : ''}): ${firstLine(err)}. ` +
        `${loadHint(process.versions.modules, process.platform, found)}See docs/platform.md for the supported systems.`,
      { cause: err },
    );
  }
  if (!isNative(mod.App)) {
    throw new Error(`${PACKAGE}: App is not the native binary (a JavaScript stand-in); refusing to start on it`);
  }
  return { uws: mod, name: PACKAGE, version, limits: [] };
}

function glibc(): string | undefined {
  const header = process.report?.getReport?.() as { header?: { glibcVersionRuntime?: string } } | undefined;
  return header?.header?.glibcVersionRuntime;
}

/** Node ABIs from 127 (Node 22) on load the package's newer uWS build, made on a glibc 2.38 system. */
const NEW_BUILD_ABI = 127;

/**
 * What to do when the binding does not load, for a Linux system whose glibc is older than the
 * build for this Node needs: the glibc found and needed, and which Node does load there.
 */
export function loadHint(abi: string, platform: string, glibcFound: string | undefined): string {
  if (platform !== 'linux' || glibcFound === undefined) return '';
  const older = (v: string, than: [number, number]): boolean => {
    const [major = 0, minor = 0] = v.split('.').map(Number);
    return major < than[0] || (major === than[0] && minor < than[1]);
  };
  if (Number(abi) >= NEW_BUILD_ABI && older(glibcFound, [2, 38])) {
    return (
      `Its build for Node 22 and later needs glibc 2.38 or newer, and this system has glibc ${glibcFound}. ` +
      'Run Sluice with Node 20 or 21 here (their build needs glibc 2.27), or on a system with glibc 2.38 or newer ' +
      '(Debian 13, Ubuntu 24.04, Fedora 39 and later) for Node 22 and 24. '
    );
  }
  if (older(glibcFound, [2, 27])) {
    return `Its Linux builds need glibc 2.27 or newer (Node 20, 21) or 2.38 or newer (Node 22 and later); this system has glibc ${glibcFound}. `;
  }
  return '';
}

function firstLine(err: unknown): string {
  // The package's own message starts with its list of supported Node versions; the loader's error follows it.
  const text = String(err instanceof Error ? err.message : err);
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  return lines.slice(0, 2).join(' ').slice(0, 400);
}
