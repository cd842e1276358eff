import busboy, { type Busboy } from 'busboy';
import { spareBuffers } from '../util/spare-buffers.ts';
import type { Ctx } from '../http/context.ts';
import { holdBody, limitBody, onBody, onBodyOverrun, resumeBody, type BodyReader } from '../http/body-flow.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import type { Ingest, IngestedFile, IngestResult } from './ingest-types.ts';
import { AppError, storageError } from '../errors.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { plainData } from './fast-search.ts';
import { watchBusboyEnd } from './end-watch.ts';
import { busboyInner, type BusboyInner, type FastPaths } from './fast-paths.ts';
import { fail, newForm, stall, unstall, type Form } from './form.ts';
import { takeFile } from './file-part.ts';

export type { Ingest, IngestedFile, IngestResult } from './ingest-types.ts';

/**
 * onData chunks that busboy parses (those that do not go straight to a file, see straightToFile)
 * are copied (uWS reuses its memory) into buffers from this pool, shared by all uploads, and a
 * buffer goes back once nothing kept a slice of it (`lent`, `unreferenced`): a warm buffer costs a
 * memcpy, a fresh one page faults and GC (bench/RESULTS.md, "Design notes moved from the code").
 * uWS hands out at most 512 KiB at a time; a larger chunk gets a one-off copy.
 */
const POOL_BYTES = 512 * 1024;
const pool = spareBuffers('chunk', POOL_BYTES, 16);
/**
 * A chunk below this is copied into a buffer of its own size (Node's shared slab under 4 KiB). A
 * small upload's body is usually one chunk that busboy reads to the end at once, so it cannot go
 * back at once; from the pool, each would hold a whole 512 KiB buffer, and the external memory that
 * reports makes V8 collect far too often.
 */
const SMALL_CHUNK = 16 * 1024;
/** No `fileSize`: busboy would count each file's bytes, and straightToFile passes them by busboy. */
const LIMITS = { fieldSize: 4096, fields: 32, files: 1000, parts: 1100, headerPairs: 64 };
/**
 * The most a form within LIMITS adds to its files' bytes: each part's delimiter (a boundary is at
 * most 70 characters) and headers (busboy stops at 16 KiB), and every text field's value. A body
 * longer than the room for files plus this cannot fit, whatever its parts.
 */
export const MAX_FORM_OVERHEAD = LIMITS.parts * (2 + 70 + 4 + 16 * 1024) + LIMITS.fields * LIMITS.fieldSize + 1024;

/** Whether the request's Content-Length alone proves its form cannot fit `room` bytes of files (none sent: no). */
export const cannotFitRoom = (ctx: Ctx, room: number): boolean => Number(ctx.headers['content-length']) > room + MAX_FORM_OVERHEAD;

/**
 * Streams a multipart body from uWS through busboy into temp parts. Must be called before the
 * handler's first await: the body is held (body-flow.ts) until start(). Backpressure runs disk →
 * pauseBody, and busboy → pauseBody. On any failure every part is removed.
 */
export function ingestMultipart(ctx: Ctx, store: BlobStore, opts: { fast: FastPaths; metrics?: Metrics }): Ingest {
  const { bb, inner, setupError } = openBusboy(ctx, opts.fast);
  const f = newForm(ctx, store, bb, inner, opts.metrics);
  holdBody(ctx);
  ctx.onAbort(() => fail(f, new AppError('MALFORMED_MULTIPART', 'client aborted the upload')));
  onBodyOverrun(ctx, () => fail(f, new AppError('BODY_OVERRUN')));
  return {
    cancel: () => fail(f, new AppError('INTERNAL', 'upload cancelled')),
    start: (reserve, room) => start(f, setupError, reserve, room),
  };
}

/** busboy for this request's form; a Content-Type it cannot parse is refused once start() runs. */
function openBusboy(ctx: Ctx, fast: FastPaths): { bb: Busboy | null; inner: BusboyInner | null; setupError: AppError | null } {
  let bb: Busboy | null = null;
  let inner: BusboyInner | null = null;
  let setupError: AppError | null = null;
  try {
    bb = busboy({
      headers: { 'content-type': ctx.headers['content-type'] ?? '' },
      limits: LIMITS,
      defParamCharset: 'utf8',
      // Names like ".." must reach cleanFileName (which keeps only a safe last segment), not vanish.
      preservePath: true,
    });
    inner = busboyInner(bb, fast);
  } catch {
    setupError = new AppError('NOT_MULTIPART');
  }
  return { bb, inner, setupError };
}

/** Ingest.start: hears busboy, then lets the body flow into it. */
function start(f: Form, setupError: AppError | null, reserve: (n: number) => boolean, room: number | undefined): Promise<IngestResult> {
  const done = new Promise<IngestResult>((resolve, reject) => {
    f.resolve = resolve;
    f.reject = reject;
  });
  if (f.finished) return Promise.reject(new AppError('MALFORMED_MULTIPART', 'client aborted the upload'));
  if (setupError || !f.bb) {
    fail(f, setupError ?? new AppError('NOT_MULTIPART'));
    return done;
  }
  // A body longer than the room plus the most a form adds cannot fit, whatever its parts: refused
  // before a byte of it is read (with Expect: 100-continue, before the client sends one).
  if (room !== undefined && cannotFitRoom(f.ctx, room)) {
    fail(f, new AppError('SIZE_EXCEEDED'));
    return done;
  }
  f.started = true;
  if (room !== undefined) limitBody(f.ctx, room + MAX_FORM_OVERHEAD, () => fail(f, new AppError('SIZE_EXCEEDED')));
  listen(f, f.bb, reserve);
  onBody(f.ctx, reader(f));
  if (!f.finished && f.stalls.size === 0) resumeBody(f.ctx);
  return done;
}

/** Takes busboy's fields and files; once it closed and every file is written, resolves the form. */
function listen(f: Form, bb: Busboy, reserve: (n: number) => boolean): void {
  const fields: Record<string, string> = {};
  const pending: Array<Promise<IngestedFile>> = [];
  bb.on('drain', () => unstall(f, bb));
  bb.on('field', (name, value, info) => {
    if (info.valueTruncated || info.nameTruncated) return fail(f, new AppError('FIELD_TOO_LONG'));
    fields[name] = value;
  });
  bb.on('file', (field, stream, info) => takeFile(f, reserve, pending, field, stream, info));
  const limitHit = (): void => fail(f, new AppError('TOO_MANY_PARTS'));
  bb.on('filesLimit', limitHit);
  bb.on('fieldsLimit', limitHit);
  bb.on('partsLimit', limitHit);
  bb.on('error', (err: Error) => fail(f, new AppError('MALFORMED_MULTIPART', `Malformed multipart body: ${err.message}`)));
  bb.on('close', () => {
    f.stopWatch();
    Promise.all(pending).then(
      (files) => {
        if (f.finished) return;
        f.finished = true;
        for (const b of f.lent.splice(0)) pool.give(b);
        f.resolve({ fields, files });
      },
      (err: unknown) => fail(f, storageError(err)),
    );
  });
}

/** The body's reader: each chunk goes straight to a file, or is copied and fed to busboy. */
function reader(f: Form): BodyReader {
  const { inner, lent } = f;
  const read: BodyReader = (ab, isLast) => {
    if (f.finished) return;
    // The chunk's memory is reused once we return (uWS's, or the body queue's): copy.
    if (isLast || !straightToFile(f, ab)) {
      const len = ab.length;
      const pooled = inner && len >= SMALL_CHUNK && len <= POOL_BYTES ? pool.take() : null;
      const chunk = pooled ? pooled.subarray(0, len) : Buffer.allocUnsafe(len);
      chunk.set(ab);
      feed(f, chunk, isLast);
      if (pooled) lent.push(pooled);
    }
    // Nothing references this chunk, nor any fed before it (see unreferenced): all go back.
    if (lent.length > 0 && unreferenced(f)) for (const b of lent.splice(0)) pool.give(b);
  };
  return read;
}

/**
 * Whether the chunks fed so far can be overwritten. busboy passes file bytes on as slices of them:
 * safe only if every slice was copied out before feed() returned: busboy took the write at once
 * (nothing queued), the parser stands inside a file part, no file stream buffered a slice, and no
 * part writer holds one. Text fields never hold a slice of a pooled chunk (busboyInner makes busboy
 * copy theirs), so a wrong answer here cannot reach a field's value.
 */
function unreferenced(f: Form): boolean {
  const { bb, inner } = f;
  if (f.finished || !bb || !inner || bb.writableLength > 0) return false;
  if (inner.fileStream() == null) return false;
  for (const s of f.kept) if (s.readableLength > 0) return false;
  for (const w of f.writers) if (w.holding()) return false;
  return true;
}

/**
 * A chunk wholly inside a file's bytes goes from uWS's memory into the file's write ring, with one
 * copy and without busboy, which would hand the same bytes to the same handler: the parser stands
 * inside a file part (busboy has a file stream open, and with it no header or delimiter pending),
 * has nothing queued, and its boundary search holds nothing back and finds no delimiter, nor the
 * start of one, in this chunk (plainData). Else false, and the chunk takes the usual path. This
 * saves the copy into a pooled chunk and busboy's work per chunk: most chunks of a large upload.
 */
function straightToFile(f: Form, chunk: Buffer): boolean {
  const { bb, inner } = f;
  if (!bb || !inner || f.finished || bb.writableLength > 0 || chunk.length === 0) return false;
  const stream = inner.fileStream();
  const sink = stream ? f.sinks.get(stream) : undefined;
  if (!stream || !sink || stream.readableLength > 0 || stream.readableFlowing !== true || stream.destroyed) return false;
  if (!plainData(inner.search(), chunk)) return false;
  sink(chunk, true);
  f.metrics?.straightToFile(chunk.length);
  return true;
}

function feed(f: Form, chunk: Buffer, isLast: boolean): void {
  const { bb } = f;
  if (!bb || f.finished) return;
  if (chunk.length > 0 && !bb.write(chunk)) stall(f, bb);
  if (isLast) {
    // First: busboy's 'close', which stops the watch, may follow end() at once.
    const stuck = (): void => fail(f, new AppError('MALFORMED_MULTIPART', 'Malformed multipart body: it ends inside a part'));
    f.stopWatch = watchBusboyEnd(() => bb.writableLength, stuck);
    bb.end();
    // An ending stream never emits 'drain': without this the socket would stay paused, and the next
    // request on a kept-alive connection would never be read.
    unstall(f, bb);
  }
}
