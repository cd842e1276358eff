import busboy from 'busboy';
import type { Ctx } from '../http/context.ts';
import type { Disk } from '../storage/disk.ts';
import type { PartResult, PartWriter } from '../storage/part-writer.ts';
import { AppError, storageError } from '../errors.ts';
import { cleanFileName, cleanMimeType } from '../util/names.ts';

export interface IngestedFile extends PartResult {
  readonly partPath: string;
  readonly name: string;
  readonly mimeType: string;
}

export interface IngestResult {
  readonly fields: Readonly<Record<string, string>>;
  readonly files: readonly IngestedFile[];
}

export interface Ingest {
  /**
   * Starts consuming the body. `reserve(n)` is asked before n more file bytes are accepted; false
   * means the cap is crossed and the request is answered 400 at once.
   */
  start(reserve: (n: number) => boolean): Promise<IngestResult>;
  /** Abandons the body (e.g. auth failed): parts removed; the caller sends the error reply. */
  cancel(): void;
}

const FILE_FIELDS = new Set(['files[]', 'files', 'file']);
const LIMITS = { fieldSize: 4096, fields: 32, files: 1000, parts: 1100, headerPairs: 64 };

/**
 * Streams a multipart body from uWS through busboy into temp parts. Must be called before the
 * handler's first await: it registers onData and pauses the socket until start(). Backpressure
 * runs disk → file stream → busboy → res.pause(). On any failure every part is removed.
 */
export function ingestMultipart(ctx: Ctx, disk: Disk): Ingest {
  const res = ctx.res;
  let bb: busboy.Busboy | null = null;
  let setupError: AppError | null = null;
  try {
    bb = busboy({
      headers: { 'content-type': ctx.headers['content-type'] ?? '' },
      limits: LIMITS,
      defParamCharset: 'utf8',
      // Names like ".." must reach cleanFileName (which keeps only a safe last segment), not vanish.
      preservePath: true,
    });
  } catch {
    setupError = new AppError('NOT_MULTIPART');
  }
  const early: Buffer[] = [];
  let bodyDone = false;
  let started = false;
  let finished = false;
  const writers: PartWriter[] = [];
  let resolveFn: (r: IngestResult) => void = () => {};
  let rejectFn: (e: unknown) => void = () => {};

  res.pause();
  res.onData((ab, isLast) => {
    if (finished) return;
    // uWS reuses the memory behind `ab` once we return: copy.
    const copy = Buffer.allocUnsafe(ab.byteLength);
    copy.set(new Uint8Array(ab));
    if (isLast) bodyDone = true;
    if (!started) {
      early.push(copy);
      return;
    }
    feed(copy, isLast);
  });

  function feed(chunk: Buffer, isLast: boolean): void {
    if (!bb || finished) return;
    if (chunk.length > 0 && !bb.write(chunk)) res.pause();
    if (isLast) bb.end();
  }

  function fail(err: unknown): void {
    if (finished) return;
    finished = true;
    for (const w of writers) w.abort();
    bb?.removeAllListeners();
    bb?.on('error', () => {});
    bb?.destroy();
    rejectFn(err);
  }

  ctx.onAbort(() => fail(new AppError('MALFORMED_MULTIPART', 'client aborted the upload')));

  return {
    cancel: () => fail(new AppError('INTERNAL', 'upload cancelled')),
    start(reserve) {
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
      const fields: Record<string, string> = {};
      const pending: Array<Promise<IngestedFile>> = [];

      bb.on('drain', () => {
        if (!finished && !ctx.done) res.resume();
      });
      bb.on('field', (name, value, info) => {
        if (info.valueTruncated || info.nameTruncated) return fail(new AppError('FIELD_TOO_LONG'));
        fields[name] = value;
      });
      bb.on('file', (field, stream, info) => {
        if (!FILE_FIELDS.has(field) || info.filename === undefined || info.filename === '') {
          stream.resume(); // not a file we keep (e.g. an empty file input): consume and drop
          return;
        }
        const name = cleanFileName(info.filename);
        const mimeType = cleanMimeType(info.mimeType, name);
        const writer = disk.createPart((err) => fail(storageError(err)));
        writers.push(writer);
        stream.on('data', (chunk: Buffer) => {
          if (finished) return;
          if (!reserve(chunk.length)) return fail(new AppError('SIZE_EXCEEDED'));
          if (!writer.write(chunk)) {
            stream.pause();
            writer.onDrain(() => stream.resume());
          }
        });
        const done = new Promise<IngestedFile>((resolve, reject) => {
          stream.on('end', () => {
            if (finished) return;
            writer.finish().then((r) => resolve({ ...r, partPath: writer.path, name, mimeType }), reject);
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
        Promise.all(pending).then(
          (files) => {
            if (finished) return;
            finished = true;
            resolveFn({ fields, files });
          },
          (err: unknown) => fail(storageError(err)),
        );
      });
      for (const [i, chunk] of early.entries()) feed(chunk, bodyDone && i === early.length - 1);
      early.length = 0;
      if (!finished) res.resume();
      return done;
    },
  };
}
