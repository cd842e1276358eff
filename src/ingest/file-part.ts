import type { Readable } from 'node:stream';
import type { FileInfo } from 'busboy';
import { AppError, storageError } from '../errors.ts';
import { cleanFileName, cleanMimeType } from '../util/names.ts';
import { BUNDLE_FIELD_NAMES } from '../bundles/service.ts';
import type { IngestedFile } from './ingest-types.ts';
import { fail, stall, unstall, type Form, type Sink } from './form.ts';

const FILE_FIELDS = new Set(['files[]', 'files', 'file']);

/**
 * One file part of the form (busboy's 'file'): refused, dropped, or streamed into a new blob writer,
 * whose finished file joins `pending`.
 */
export function takeFile(
  f: Form,
  reserve: (n: number) => boolean,
  pending: Array<Promise<IngestedFile>>,
  field: string,
  stream: Readable,
  info: FileInfo,
): void {
  // A text field sent as a file part (`curl -F access_password=@pw.txt`) is refused: dropped,
  // it left the bundle public while its uploader believed it locked.
  if (BUNDLE_FIELD_NAMES.has(field)) {
    stream.on('error', () => {});
    stream.resume();
    return fail(f, new AppError('INVALID_FIELD', `${field} must be a text field, not a file`));
  }
  if (!FILE_FIELDS.has(field) || info.filename === undefined || info.filename === '') {
    // Not a file we keep (e.g. an empty file input): consume and drop, its bytes still counted
    // against the cap (a body is refused once it holds more than the cap, whatever its parts).
    // busboy destroys the stream with an error when the body ends inside it; unheard, that
    // error would kill the process.
    stream.on('error', () => {});
    stream.on('data', (chunk: Buffer) => {
      if (!f.finished && !reserve(chunk.length)) fail(f, new AppError('SIZE_EXCEEDED'));
    });
    return;
  }
  const name = cleanFileName(info.filename);
  const mimeType = cleanMimeType(info.mimeType, name);
  const writer = f.store.createWriter({ onError: (err) => fail(f, storageError(err)) });
  f.inner?.fileStarted();
  f.writers.push(writer);
  f.kept.add(stream);
  const sink: Sink = (chunk, transient) => {
    if (f.finished) return;
    if (!reserve(chunk.length)) return fail(f, new AppError('SIZE_EXCEEDED'));
    if (!writer.write(chunk, transient) && !f.stalls.has(writer)) {
      stall(f, writer);
      writer.onDrain(() => unstall(f, writer));
    }
  };
  f.sinks.set(stream, sink);
  stream.once('end', () => {
    f.kept.delete(stream);
    f.sinks.delete(stream);
  });
  stream.on('data', (chunk: Buffer) => sink(chunk, false));
  const done = new Promise<IngestedFile>((resolve, reject) => {
    stream.on('end', () => {
      if (f.finished) return;
      writer.finish().then((r) => resolve({ ...r, writer, name, mimeType }), reject);
    });
    stream.on('error', reject);
  });
  // After a failure nobody awaits the files any more: their rejections are expected.
  done.catch(() => {});
  pending.push(done);
}
