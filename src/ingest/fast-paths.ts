import { createRequire } from 'node:module';
import type { Readable } from 'node:stream';
import type { Busboy } from 'busboy';
import type { Logger } from 'pino';
import { fastPush, type Push } from './fast-search.ts';

/**
 * Which multipart shortcuts run. Both lean on private internals of busboy and streamsearch, so each is
 * on only for the exact versions it was written against; any other version takes busboy's public path.
 */
export interface FastPaths {
  /** streamsearch's boundary scan replaced by findNeedle (needle-search.ts, installed by fast-search.ts). */
  readonly multipartSearch: boolean;
  /**
   * the multipart reader (multipart.ts, form.ts, file-part.ts) reads busboy's `_fileStream` and `_bparser`: chunks wholly inside a file skip busboy
   * (straightToFile), and parsed chunks come from a reused pool instead of fresh buffers.
   */
  readonly straightToFile: boolean;
}

export interface DependencyVersions {
  readonly busboy: string;
  readonly streamsearch: string;
}

/** The versions the shortcuts were written and tested against. package.json pins both exactly. */
export const KNOWN_VERSIONS: DependencyVersions = { busboy: '1.6.0', streamsearch: '1.1.0' };

export const NO_FAST_PATHS: FastPaths = { multipartSearch: false, straightToFile: false };

const fromHere = createRequire(import.meta.url);
/** Resolves from busboy's own location: the streamsearch busboy itself loads. */
const fromBusboy = createRequire(fromHere.resolve('busboy'));

/** The installed versions, read from the packages' own package.json. */
export function installedVersions(): DependencyVersions {
  const version = (req: NodeJS.Require, name: string): string => String((req(`${name}/package.json`) as { version?: unknown }).version);
  return { busboy: version(fromHere, 'busboy'), streamsearch: version(fromBusboy, 'streamsearch') };
}

/** Which shortcuts these versions allow. straightToFile reads streamsearch's state too, so it needs both. */
export function fastPathsFor(v: DependencyVersions): FastPaths {
  const search = v.streamsearch === KNOWN_VERSIONS.streamsearch;
  return { multipartSearch: search, straightToFile: search && v.busboy === KNOWN_VERSIONS.busboy };
}

/**
 * Checks the installed versions, installs the fast search if they allow it, and logs once what is
 * off and why. Called once per process by startApp.
 */
export function enableFastPaths(log: Logger, versions: DependencyVersions = installedVersions()): FastPaths {
  const allowed = fastPathsFor(versions);
  const paths = { ...allowed, multipartSearch: installFastSearch(versions) };
  if (!paths.multipartSearch || !paths.straightToFile) {
    log.warn({ installed: versions, known: KNOWN_VERSIONS, fastPaths: paths }, 'multipart fast paths off for these busboy/streamsearch versions: uploads take the plain path');
  }
  return Object.freeze(paths);
}

/** streamsearch's own push, for comparison in tests and the bench; null until installed. */
export let originalPush: Push | null = null;

/** Installs fastPush into the streamsearch busboy loads; false (untouched) for another version. */
export function installFastSearch(versions: DependencyVersions = installedVersions()): boolean {
  if (!fastPathsFor(versions).multipartSearch) return false;
  const proto = (fromBusboy('streamsearch') as { prototype: { push: Push } }).prototype;
  if (proto.push !== fastPush) {
    originalPush = proto.push;
    proto.push = fastPush;
  }
  return true;
}

type SearchCb = (isMatch: boolean, data: Buffer | undefined, start: number, end: number, isSafeData: boolean) => void;

/** What the multipart reader reads of busboy's private state (busboy 1.6.0, streamsearch 1.1.0). */
export interface BusboyInner {
  /** The file stream of the part being parsed: null or undefined outside a file part. */
  fileStream(): Readable | null | undefined;
  /** busboy's boundary search (a streamsearch instance), for plainData. */
  search(): unknown;
  /** The part being parsed is a file we write: until it ends, busboy may hand its bytes on as slices. */
  fileStarted(): void;
}

/**
 * busboy's internals, or null when the versions are unknown or the fields are not where they should
 * be: then nothing skips busboy and no pooled chunk is reused.
 *
 * busboy keeps slices of a text field's bytes until the field ends. So that a text field never holds
 * a slice of a pooled chunk, whatever multipart.ts concludes about reuse, busboy is told that bytes
 * may be kept (streamsearch's `isSafeData`) only inside a file part we write; anywhere else it copies.
 */
export function busboyInner(bb: Busboy, fast: FastPaths): BusboyInner | null {
  if (!fast.straightToFile) return null;
  const self = bb as unknown as { _fileStream?: Readable | null; _bparser?: { _cb?: SearchCb } };
  const parser = self._bparser;
  if (!('_fileStream' in self) || typeof parser?._cb !== 'function') return null;
  const cb = parser._cb;
  let inFile = false;
  parser._cb = (isMatch, data, start, end, isSafeData) => {
    cb(isMatch, data, start, end, isSafeData && inFile);
    if (isMatch) inFile = false; // a delimiter ends the part
  };
  return {
    fileStream: () => self._fileStream,
    search: () => self._bparser,
    fileStarted: () => {
      inFile = true;
    },
  };
}
