import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';

/**
 * A request body's overflow on disk (body-flow.ts): bytes that arrived while their reader was
 * paused, past what the memory queue takes, waiting in arrival order to be read back.
 */
export interface Spill {
  readonly fd: number;
  /** File offsets: bytes in [readAt, writeAt) are waiting. */
  readAt: number;
  writeAt: number;
  /** Offset where the body's last chunk ends, once it was spilled. */
  lastAt: number | null;
  reading: boolean;
  /** The buffer pieces are read into, taken from body-flow's spares while the spill holds bytes. */
  piece: Buffer | null;
}

/**
 * Spill files are kept open for the next request, this many at most: rewriting pages already in
 * the page cache is several times faster than writing fresh ones, and a slow spill lengthens the
 * read loop that fills it.
 */
const KEPT_SPILL_FILES = 8;
const kept: number[] = [];
let spillDir = os.tmpdir();

/** Where spill files go (made if missing): a directory on a real file system, such as DATA_DIR/tmp. Set once at start. */
export function configureBodyFlow(settings: { spillDir: string }): void {
  fs.mkdirSync(settings.spillDir, { recursive: true, mode: 0o700 });
  spillDir = settings.spillDir;
}

export const waiting = (s: Spill | null): boolean => s !== null && s.readAt < s.writeAt;

/** An open spill: a kept file, or a new one unlinked at once, so nothing is ever left behind. */
export function openSpill(): Spill {
  let fd = kept.pop();
  if (fd === undefined) {
    const file = path.join(spillDir, `body-${randomBytes(8).toString('hex')}.spill`);
    fd = fs.openSync(file, 'w+', 0o600);
    fs.unlinkSync(file);
  }
  return { fd, readAt: 0, writeAt: 0, lastAt: null, reading: false, piece: null };
}

/** Writes a chunk at the spill's end, at once (uWS reuses its memory when onData returns). Throws on a full disk. */
export function appendSpill(s: Spill, ab: ArrayBuffer, isLast: boolean): void {
  fs.writeSync(s.fd, new Uint8Array(ab), 0, ab.byteLength, s.writeAt);
  s.writeAt += ab.byteLength;
  if (isLast) s.lastAt = s.writeAt;
}

/** Gives the file up. Only bytes its request wrote are ever read from it, so a kept file's old contents never leak. */
export function closeSpill(s: Spill): void {
  if (kept.length < KEPT_SPILL_FILES) kept.push(s.fd);
  else fs.close(s.fd, () => {});
}
