// Reference, not a peer: the least a durable server on this stack does with an upload. uWebSockets.js,
// loaded as Sluice loads it, copies each chunk of the body (the one copy every uWS handler must make)
// into page-aligned 1 MiB buffers, writes each full one with O_DIRECT as Sluice does, then cuts the
// padded tail, fsyncs the file and its directory and answers. No parsing, no checksum, no database:
// what Sluice takes longer than this row is its own work on the bytes and its bookkeeping, with the
// same kernel receive and write paths. Env: PORT, DIR (where the bodies go; each is removed once answered).
// It takes tus uploads the same way (creation, then PATCHes each appended, fsynced and answered), with no
// database: the offset is the file's length. What Sluice's tus takes longer is its admission, lock and record.
import fs from 'node:fs';
import path from 'node:path';
import { serveUws, uploadReply, type App, type Response } from '../lib/uws-baseline.ts';
import { pageAligned, spareBuffers } from '../../src/util/spare-buffers.ts';
import { writeDirect, type DirectIo } from '../../src/storage/disk/direct-io.ts';

const dir = process.env.DIR ?? '.';
const SLOT = 1 << 20;
/** Buffers per upload, as Sluice's write ring holds for one file. */
const DEPTH = 4;
const spare = spareBuffers('uws-disk', SLOT, 64, pageAligned);
const io: DirectIo = { supported: true };
let seq = 0;

interface Upload {
  fd: number;
  file: string;
  /** Buffers ready to fill. */
  free: Buffer[];
  /** The one being filled, and how much of it is. */
  fill: Buffer | null;
  used: number;
  /** File offset of `fill`'s first byte. */
  at: number;
  inFlight: number;
  failed: Error | null;
  paused: boolean;
  finished: boolean;
  /** Runs once nothing is in flight after the last chunk. */
  drained: (() => void) | null;
}

const newFile = (): string => path.join(dir, `body-${process.pid}-${++seq}`);

/** Opens `file` for the body's bytes from offset `at` (a whole number of blocks). */
function open(file: string, at: number): Upload {
  const flags = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_DIRECT | (at === 0 ? fs.constants.O_TRUNC : 0);
  const fd = fs.openSync(file, flags, 0o600);
  const free = Array.from({ length: DEPTH }, () => spare.take());
  return { fd, file, free, fill: null, used: 0, at, inFlight: 0, failed: null, paused: false, finished: false, drained: null };
}

/** Writes the buffer being filled; its return to `free` resumes a paused body. */
function flush(u: Upload, resume: () => void): void {
  const buf = u.fill!;
  const len = u.used;
  const at = u.at;
  u.fill = null;
  u.at += len;
  u.used = 0;
  u.inFlight++;
  writeDirect(io, u.fd, buf, len, at, (err) => {
    u.inFlight--;
    u.failed ??= err;
    u.free.push(buf);
    if (u.paused) {
      u.paused = false;
      resume();
    }
    if (u.inFlight === 0) u.drained?.();
  });
}

/** Copies a chunk in, writing each buffer it fills; false when every buffer is out (the body must pause). */
function take(u: Upload, chunk: Uint8Array, resume: () => void): boolean {
  let off = 0;
  while (off < chunk.length) {
    // A chunk that uWS had read before the pause took effect still lands: a spare holds it.
    u.fill ??= u.free.pop() ?? spare.take();
    const n = Math.min(SLOT - u.used, chunk.length - off);
    u.fill.set(chunk.subarray(off, off + n), u.used);
    u.used += n;
    off += n;
    if (u.used === SLOT) flush(u, resume);
  }
  return u.free.length > 0;
}

/** Writes what is left, cuts the file at `size` (its whole length), fsyncs it and its directory. */
function finish(u: Upload, size: number, done: (err: Error | null) => void): void {
  if (u.finished) return;
  u.finished = true;
  const end = (): void => {
    if (u.failed) return close(u, u.failed, done);
    fs.ftruncate(u.fd, size, (err) => {
      if (err) return close(u, err, done);
      fs.fsync(u.fd, (err2) => close(u, err2, done));
    });
  };
  if (u.fill && u.used > 0) flush(u, () => {});
  if (u.inFlight === 0) end();
  else u.drained = end;
}

function close(u: Upload, err: Error | null, done: (err: Error | null) => void): void {
  fs.close(u.fd, () => {
    for (const b of u.free.splice(0)) spare.give(b);
    if (u.fill) spare.give(u.fill);
    if (err) return done(err);
    // The directory entry is durable too, as a stored file's is.
    fs.open(dir, 'r', (e, dfd) => {
      if (e) return done(e);
      fs.fsync(dfd, (e2) => fs.close(dfd, () => done(e2)));
    });
  });
}

/**
 * Takes the body into `file` from offset `at`, durably; `answer` gets the body's size, or is never called once the
 * client is gone (the file is then removed).
 */
function receive(res: Response, file: string, at: number, answer: (err: Error | null, size: number) => void): void {
  let aborted = false;
  let size = 0;
  let u: Upload;
  try {
    u = open(file, at);
  } catch (err) {
    // DIR refuses O_DIRECT (tmpfs), or no descriptor is left: answered, not a crash.
    answer(err as Error, 0);
    return;
  }
  const resume = (): void => {
    if (!aborted) res.resume();
  };
  res.onAborted(() => {
    aborted = true;
    u.failed ??= new Error('aborted');
    finish(u, at + size, () => fs.rm(u.file, { force: true }, () => {}));
  });
  res.onData((ab, isLast) => {
    const chunk = new Uint8Array(ab);
    size += chunk.length;
    // The last chunk never pauses: nothing would resume the socket for the next request.
    if (!take(u, chunk, resume) && !isLast) {
      u.paused = true;
      res.pause();
    }
    if (!isLast) return;
    finish(u, at + size, (err) => {
      if (!aborted) answer(err, size);
    });
  });
}

const failed = (res: Response, err: Error): void => {
  res.cork(() => res.writeStatus('500 Internal Server Error').end(JSON.stringify({ success: false, error: String(err) })));
};

/** tus uploads: their file and declared length, by id. */
const uploads = new Map<string, { file: string; length: number }>();

function serveTus(app: App, port: number): void {
  app.post('/api/v1/tus/', (res, req) => {
    const length = Number(req.getHeader('upload-length'));
    const id = String(++seq);
    const file = newFile();
    fs.writeFileSync(file, '', { mode: 0o600 });
    uploads.set(id, { file, length });
    res
      .writeStatus('201 Created')
      .writeHeader('tus-resumable', '1.0.0')
      .writeHeader('location', `http://127.0.0.1:${port}/api/v1/tus/${id}`)
      .end();
  });
  app.patch('/api/v1/tus/:id', (res, req) => {
    const id = req.getParameter(0) ?? '';
    const up = uploads.get(id);
    const at = Number(req.getHeader('upload-offset'));
    if (!up || at % 4096 !== 0) {
      res.writeStatus('404 Not Found').end();
      return;
    }
    receive(res, up.file, at, (err, size) => {
      if (err) return failed(res, err);
      // The finished upload is dropped, as a multipart body is once answered.
      if (at + size === up.length) fs.rm(up.file, { force: true }, () => uploads.delete(id));
      res.cork(() => res.writeStatus('204 No Content').writeHeader('tus-resumable', '1.0.0').writeHeader('upload-offset', String(at + size)).endWithoutBody());
    });
  });
}

serveUws(
  'uws-disk',
  (res) => {
    const file = newFile();
    receive(res, file, 0, (err, size) => {
      fs.rm(file, { force: true }, () => {});
      if (err) return failed(res, err);
      res.cork(() => res.writeStatus('201 Created').writeHeader('content-type', 'application/json').end(uploadReply(size)));
    });
  },
  serveTus,
);
