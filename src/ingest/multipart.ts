import type { Readable } from 'node:stream';
import busboy from 'busboy';
import { spareBuffers } from '../util/spare-buffers.ts';
import type { Ctx } from '../http/context.ts';
import { dropBody, holdBody, limitBody, onBody, onBodyOverrun, pauseBody, resumeBody } from '../http/body-flow.ts';
import type { BlobStore, BlobWriter } from '../storage/blob-store.ts';
import type { Ingest, IngestedFile, IngestResult } from './ingest-types.ts';
import { AppError, storageError } from '../errors.ts';
import { cleanFileName, cleanMimeType } from '../util/names.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { plainData } from './fast-search.ts';
import { watchBusboyEnd } from './end-watch.ts';
import { busboyInner, type BusboyInner, type FastPaths } from './fast-paths.ts';
import { BUNDLE_FIELD_NAMES } from '../bundles/service.ts';

export type { Ingest, IngestedFile, IngestResult } from './ingest-types.ts';

const FILE_FIELDS = new Set(['files[]', 'files', 'file']);

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

/**
 * Streams a multipart body from uWS through busboy into temp parts. Must be called before the
 * handler's first await: the body is held (body-flow.ts) until start(). Backpressure runs disk →
 * pauseBody, and busboy → pauseBody. On any failure every part is removed.
 */
export function ingestMultipart(ctx: Ctx, store: BlobStore, opts: { fast: FastPaths; metrics?: Metrics }): Ingest {
  let bb: busboy.Busboy | null = null;
  // Without busboy's internals (unknown versions): no chunk skips busboy and none is pooled.
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
    inner = busboyInner(bb, opts.fast);
  } catch {
    setupError = new AppError('NOT_MULTIPART');
  }
  let started = false;
  let finished = false;
  const writers: BlobWriter[] = [];
  let resolveFn: (r: IngestResult) => void = () => {};
  let rejectFn: (e: unknown) => void = () => {};

  /**
   * Pooled chunks fed so far that something may still reference. They go back at the next chunk after
   * which nothing references any (backpressure keeps them few), or once busboy closed and every file
   * was written; after a failure they are left to the GC.
   */
  const lent: Buffer[] = [];

  /** File streams we consume, until they end: a paused or not yet flowing one buffers slices. */
  const kept = new Set<Readable>();

  holdBody(ctx);
  const read = (ab: Buffer, isLast: boolean): void => {
    if (finished) return;
    // The chunk's memory is reused once we return (uWS's, or the body queue's): copy.
    if (isLast || !straightToFile(ab)) {
      const len = ab.length;
      const pooled = inner && len >= SMALL_CHUNK && len <= POOL_BYTES ? pool.take() : null;
      const chunk = pooled ? pooled.subarray(0, len) : Buffer.allocUnsafe(len);
      chunk.set(ab);
      feed(chunk, isLast);
      if (pooled) lent.push(pooled);
    }
    // Nothing references this chunk, nor any fed before it (see unreferenced): all go back.
    if (lent.length > 0 && unreferenced()) for (const b of lent.splice(0)) pool.give(b);
  };

  /**
   * Whether the chunks fed so far can be overwritten. busboy passes file bytes on as slices of them:
   * safe only if every slice was copied out before feed() returned: busboy took the write at once
   * (nothing queued), the parser stands inside a file part, no file stream buffered a slice, and no
   * part writer holds one. Text fields never hold a slice of a pooled chunk (busboyInner makes busboy
   * copy theirs), so a wrong answer here cannot reach a field's value.
   */
  function unreferenced(): boolean {
    if (finished || !bb || !inner || bb.writableLength > 0) return false;
    if (inner.fileStream() == null) return false;
    for (const s of kept) if (s.readableLength > 0) return false;
    for (const w of writers) if (w.holding()) return false;
    return true;
  }

  /** How each file stream we write to takes its bytes, for straightToFile. */
  const sinks = new Map<Readable, (chunk: Buffer, transient: boolean) => void>();

  /**
   * A chunk wholly inside a file's bytes goes from uWS's memory into the file's write ring, with one
   * copy and without busboy, which would hand the same bytes to the same handler: the parser stands
   * inside a file part (busboy has a file stream open, and with it no header or delimiter pending),
   * has nothing queued, and its boundary search holds nothing back and finds no delimiter, nor the
   * start of one, in this chunk (plainData). Else false, and the chunk takes the usual path. This
   * saves the copy into a pooled chunk and busboy's work per chunk: most chunks of a large upload.
   */
  function straightToFile(chunk: Buffer): boolean {
    if (!bb || !inner || finished || bb.writableLength > 0 || chunk.length === 0) return false;
    const stream = inner.fileStream();
    const sink = stream ? sinks.get(stream) : undefined;
    if (!stream || !sink || stream.readableLength > 0 || stream.readableFlowing !== true || stream.destroyed) return false;
    if (!plainData(inner.search(), chunk)) return false;
    sink(chunk, true);
    opts.metrics?.straightToFile(chunk.length);
    return true;
  }

  /**
   * Why the socket is paused: busboy's queue, or a part writer short of room. Writers pause the
   * socket directly, not their file stream, so busboy never queues a slice of a pooled chunk.
   */
  const stalls = new Set<object>();
  const stall = (why: object): void => {
    stalls.add(why);
    pauseBody(ctx);
  };
  const unstall = (why: object): void => {
    stalls.delete(why);
    if (stalls.size === 0 && started && !finished && !ctx.done) resumeBody(ctx);
  };

  let stopWatch = (): void => {};
  function feed(chunk: Buffer, isLast: boolean): void {
    if (!bb || finished) return;
    if (chunk.length > 0 && !bb.write(chunk)) stall(bb);
    if (isLast) {
      // First: busboy's 'close', which stops the watch, may follow end() at once.
      const stuck = (): void => fail(new AppError('MALFORMED_MULTIPART', 'Malformed multipart body: it ends inside a part'));
      stopWatch = watchBusboyEnd(() => bb?.writableLength ?? 0, stuck);
      bb.end();
      // An ending stream never emits 'drain': without this the socket would stay paused, and the next
      // request on a kept-alive connection would never be read.
      unstall(bb);
    }
  }

  function fail(err: unknown): void {
    stopWatch();
    if (finished) return;
    finished = true;
    for (const w of writers) w.abort().catch(() => {});
    bb?.removeAllListeners();
    bb?.on('error', () => {});
    bb?.destroy();
    // Nothing more is read: the reply pauses the socket and leaves the closing to the client (see send).
    stalls.clear();
    pauseBody(ctx);
    dropBody(ctx);
    rejectFn(err);
  }

  ctx.onAbort(() => fail(new AppError('MALFORMED_MULTIPART', 'client aborted the upload')));
  onBodyOverrun(ctx, () => fail(new AppError('BODY_OVERRUN')));

  return {
    cancel: () => fail(new AppError('INTERNAL', 'upload cancelled')),
    start(reserve, room) {
      const done = new Promise<IngestResult>((resolve, reject) => {
        resolveFn = resolve;
        rejectFn = reject;
      });
      if (finished) return Promise.reject(new AppError('MALFORMED_MULTIPART', 'client aborted the upload'));
      if (setupError || !bb) {
        fail(setupError ?? new AppError('NOT_MULTIPART'));
        return done;
      }
      started = true;
      if (room !== undefined) limitBody(ctx, room + MAX_FORM_OVERHEAD, () => fail(new AppError('SIZE_EXCEEDED')));
      const fields: Record<string, string> = {};
      const pending: Array<Promise<IngestedFile>> = [];

      bb.on('drain', () => unstall(bb!));
      bb.on('field', (name, value, info) => {
        if (info.valueTruncated || info.nameTruncated) return fail(new AppError('FIELD_TOO_LONG'));
        fields[name] = value;
      });
      bb.on('file', (field, stream, info) => {
        // A text field sent as a file part (`curl -F access_password=@pw.txt`) is refused: dropped,
        // it left the bundle public while its uploader believed it locked.
        if (BUNDLE_FIELD_NAMES.has(field)) {
          stream.on('error', () => {});
          stream.resume();
          return fail(new AppError('INVALID_FIELD', `${field} must be a text field, not a file`));
        }
        if (!FILE_FIELDS.has(field) || info.filename === undefined || info.filename === '') {
          // Not a file we keep (e.g. an empty file input): consume and drop, its bytes still counted
          // against the cap (a body is refused once it holds more than the cap, whatever its parts).
          // busboy destroys the stream with an error when the body ends inside it; unheard, that
          // error would kill the process.
          stream.on('error', () => {});
          stream.on('data', (chunk: Buffer) => {
            if (!finished && !reserve(chunk.length)) fail(new AppError('SIZE_EXCEEDED'));
          });
          return;
        }
        const name = cleanFileName(info.filename);
        const mimeType = cleanMimeType(info.mimeType, name);
        const writer = store.createWriter({ onError: (err) => fail(storageError(err)) });
        inner?.fileStarted();
        writers.push(writer);
        kept.add(stream);
        const sink = (chunk: Buffer, transient: boolean): void => {
          if (finished) return;
          if (!reserve(chunk.length)) return fail(new AppError('SIZE_EXCEEDED'));
          if (!writer.write(chunk, transient) && !stalls.has(writer)) {
            stall(writer);
            writer.onDrain(() => unstall(writer));
          }
        };
        sinks.set(stream, sink);
        stream.once('end', () => {
          kept.delete(stream);
          sinks.delete(stream);
        });
        stream.on('data', (chunk: Buffer) => sink(chunk, false));
        const done = new Promise<IngestedFile>((resolve, reject) => {
          stream.on('end', () => {
            if (finished) return;
            writer.finish().then((r) => resolve({ ...r, writer, name, mimeType }), reject);
          });
          stream.on('error', reject);
        });
        // After a failure nobody awaits the files any more: their rejections are expected.
        done.catch(() => {});
        pending.push(done);
      });
      const limitHit = (): void => fail(new AppError('TOO_MANY_PARTS'));
      bb.on('filesLimit', limitHit);
      bb.on('fieldsLimit', limitHit);
      bb.on('partsLimit', limitHit);
      bb.on('error', (err: Error) => fail(new AppError('MALFORMED_MULTIPART', `Malformed multipart body: ${err.message}`)));
      bb.on('close', () => {
        stopWatch();
        Promise.all(pending).then(
          (files) => {
            if (finished) return;
            finished = true;
            for (const b of lent.splice(0)) pool.give(b);
            resolveFn({ fields, files });
          },
          (err: unknown) => fail(storageError(err)),
        );
      });
      onBody(ctx, read);
      if (!finished && stalls.size === 0) resumeBody(ctx);
      return done;
    },
  };
}
