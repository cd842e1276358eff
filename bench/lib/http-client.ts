// Streaming HTTP clients: multipart uploads generated on the fly, downloads that only count bytes.
// Memory stays O(1 MiB) whatever the size: file bytes are slices of one reused pseudo-random buffer.
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { open } from 'node:fs/promises';
import { MiB } from './report.ts';
import { IDLE_TIMEOUT_MS } from './download-client.ts';

/** uWS v20.30 drops requests whose Content-Length has 10+ digits; bodies this big go chunked. */
export const CONTENT_LENGTH_LIMIT = 1e9;

/** 1 MiB of deterministic xorshift32 output, identical in every process (so files can be compared). */
export const PATTERN: Buffer = (() => {
  const buf = Buffer.allocUnsafe(MiB);
  let x = 0x9e3779b9;
  for (let i = 0; i < MiB; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    buf.writeUInt32LE(x >>> 0, i);
  }
  return buf;
})();

/** Yields `size` bytes as views of PATTERN: no copies, no allocation per chunk. */
export function* patternChunks(size: number): Generator<Buffer> {
  for (let left = size; left > 0; left -= MiB) yield left >= MiB ? PATTERN : PATTERN.subarray(0, left);
}

function drainOrClose(req: http.ClientRequest): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      req.off('drain', done);
      req.off('close', done);
      resolve();
    };
    req.on('drain', done);
    req.on('close', done);
  });
}

export interface FilePart {
  name: string;
  size: number;
  /** The file's bytes, `size` of them in all; default patternChunks. */
  chunks?: (size: number) => Iterable<Buffer>;
}

export interface UploadResult {
  status: number;
  body: string;
  /** Parsed response body, undefined when it is not JSON. */
  json: unknown;
  /** Request body bytes (multipart framing included). */
  bodyBytes: number;
  chunked: boolean;
  ms: number;
  /** When the last body byte was handed to the kernel (ms from the start); NaN if it never was. */
  sentMs: number;
}

export interface UploadOptions {
  /** Force Transfer-Encoding: chunked; default only when the body is >= CONTENT_LENGTH_LIMIT bytes. */
  chunked?: boolean;
  headers?: Record<string, string>;
  field?: string;
}

/** POSTs files as multipart/form-data (field `files[]`), streaming the body with backpressure. */
export function uploadMultipart(url: string, files: readonly FilePart[], opts: UploadOptions = {}): Promise<UploadResult> {
  const boundary = `----SluiceBench${randomBytes(12).toString('hex')}`;
  const field = opts.field ?? 'files[]';
  const heads = files.map((f) =>
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="${field}"; filename="${f.name}"\r\n` +
        'Content-Type: application/octet-stream\r\n\r\n',
    ),
  );
  const crlf = Buffer.from('\r\n');
  const tail = Buffer.from(`--${boundary}--\r\n`);
  const bodyBytes =
    files.reduce((n, f, i) => n + heads[i]!.length + f.size + crlf.length, 0) + tail.length;
  const chunked = opts.chunked ?? bodyBytes >= CONTENT_LENGTH_LIMIT;
  const headers: Record<string, string> = {
    'content-type': `multipart/form-data; boundary=${boundary}`,
    ...(chunked ? { 'transfer-encoding': 'chunked' } : { 'content-length': String(bodyBytes) }),
    ...opts.headers,
  };
  const started = performance.now();
  return new Promise<UploadResult>((resolve, reject) => {
    let responded = false;
    let sentMs = NaN;
    const req = http.request(url, { method: 'POST', headers, agent: false });
    req.on('error', reject);
    req.on('finish', () => (sentMs = performance.now() - started));
    // a stalled server fails the run instead of hanging the bench
    req.setTimeout(IDLE_TIMEOUT_MS, () => req.destroy(new Error(`upload idle for ${IDLE_TIMEOUT_MS / 1000} s`)));
    req.on('response', (res) => {
      responded = true;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('error', reject);
      res.on('end', () => {
        if (!req.writableFinished) req.destroy(); // answered before the body was sent
        let json: unknown;
        try {
          json = JSON.parse(body);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, body, json, bodyBytes, chunked, ms: performance.now() - started, sentMs });
      });
    });
    function* pieces(): Generator<Buffer> {
      for (let i = 0; i < files.length; i++) {
        yield heads[i]!;
        yield* (files[i]!.chunks ?? patternChunks)(files[i]!.size);
        yield crlf;
      }
    }
    const write = async (): Promise<void> => {
      for (const piece of pieces()) {
        if (responded || req.destroyed) return; // early answer (e.g. 400 over cap): stop sending
        if (!req.write(piece)) await drainOrClose(req);
      }
      req.end(tail);
    };
    write().catch((err: unknown) => req.destroy(err instanceof Error ? err : new Error(String(err))));
  });
}

/** Writes the same bytes an upload of `size` would carry, without buffering the file. */
export async function writePatternFile(file: string, size: number): Promise<void> {
  const fh = await open(file, 'w');
  try {
    for (const chunk of patternChunks(size)) await fh.write(chunk);
  } finally {
    await fh.close();
  }
}
