import net from 'node:net';
import tls from 'node:tls';
import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { BlobError } from '../../errors.ts';
import { captureSigned, failedAnswer, isNetworkError, requestTarget, retrying, unavailable } from './wire.ts';
import { spareBuffers } from '../../util/spare-buffers.ts';

/** A GET the SDK built and signed (credentials, endpoint, addressing and all), to be sent as is. */
export interface SignedGet {
  readonly tls: boolean;
  readonly host: string;
  readonly port: number;
  /** Path and query, encoded as the SDK signed them. */
  readonly target: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** The request `client` would send for a GetObject of `objectKey`, signed but not sent (wire.ts). */
export async function signGet(client: S3Client, bucket: string, objectKey: string): Promise<SignedGet> {
  const req = await captureSigned(client, new GetObjectCommand({ Bucket: bucket, Key: objectKey }));
  return { tls: req.tls, host: req.host, port: req.port, target: requestTarget(req.path, req.query), headers: req.headers };
}

/** Bytes of an object body, read in order into the caller's buffers (a socket GET's, or an SDK response's in s3-read.ts). */
export interface BodyFeed {
  /** Copies the next bytes into `target`; resolves with how many (fewer only at the body's end). */
  fill(target: Buffer): Promise<number>;
  /** False once the body failed or was closed before its end: no further fill can succeed. */
  readonly usable: boolean;
  destroy(): void;
}

/** Each GET reads through one of these; spares for sixteen GETs at once are kept. */
const LANDING_BYTES = 256 * 1024;
const landings = spareBuffers('s3 get', LANDING_BYTES, 16);
const MAX_HEAD = 64 * 1024;
const CONNECT_TIMEOUT_MS = 5000;

/**
 * Bytes [start, end) of the object `signed` names, over a socket of its own that reads into one
 * reused buffer (`onread`) from which each chunk is copied straight into the caller's target.
 * node:http, under the SDK, allocates a fresh buffer for every socket read; allocating and then
 * collecting those cost a download several times the CPU of this (bench/RESULTS.md). Between
 * fills the socket does not read, so the store waits on TCP and nothing piles up here.
 * Refused connections, resets before an answer and 5xx answers are tried again like the SDK does,
 * then become UNAVAILABLE; 404 is NOT_FOUND, 416 OUT_OF_RANGE.
 */
export async function getBody(
  signed: SignedGet,
  start: number,
  end: number,
  what: string,
  idleMs: number,
  signal?: AbortSignal,
): Promise<BodyFeed> {
  if (!(end > start)) throw new RangeError(`GET ${what}: an empty range (${start}-${end})`);
  return retrying(() => exchange(signed, start, end, what, idleMs, signal), signal);
}

function exchange(signed: SignedGet, start: number, end: number, what: string, idleMs: number, signal?: AbortSignal): Promise<BodyFeed> {
  const landing = landings.take();
  let head: Buffer | null = Buffer.alloc(0);
  let remaining = end - start;
  let rest: Buffer | null = null;
  let want: { target: Buffer; at: number; done: (err: Error | null) => void } | null = null;
  let failure: Error | null = null;
  let answered: ((err: Error | null) => void) | null = null;

  // Errors after the last byte arrived change nothing: the body is whole.
  const fail = (err: Error): void => {
    if (failure || (head === null && remaining === 0)) return;
    failure = err;
    socket.destroy();
    answered?.(err);
    want?.done(err);
  };
  // Copies what it can of `chunk` into the waiting target; returns what is left of it.
  const deliver = (chunk: Buffer): Buffer | null => {
    if (!want) return chunk.length ? chunk : null;
    const n = chunk.copy(want.target, want.at);
    want.at += n;
    const left = n < chunk.length ? chunk.subarray(n) : null;
    if (want.at === want.target.length || remaining === 0) want.done(null);
    return left;
  };
  const onHead = (bytes: Buffer): boolean => {
    head = Buffer.concat([head!, bytes]);
    const cut = head.indexOf('\r\n\r\n');
    if (cut < 0) {
      if (head.length > MAX_HEAD) fail(new Error(`GET ${what}: the object store's response head is too large`));
      return true;
    }
    const body = head.subarray(cut + 4);
    const problem = checkHead(head.subarray(0, cut).toString('latin1'), start, end, what, body);
    head = null;
    if (problem) {
      fail(problem);
      return false;
    }
    if (body.length > remaining) {
      fail(new Error(`GET ${what}: the object store sent more than its Content-Length`));
      return false;
    }
    remaining -= body.length;
    rest = body.length ? body : null;
    answered?.(null);
    return false; // the first fill resumes
  };

  const socketOpts = {
    host: signed.host,
    port: signed.port,
    noDelay: true,
    onread: {
      buffer: landing,
      callback(n: number): boolean {
        if (failure) return false;
        const chunk = landing.subarray(0, n);
        if (head) return onHead(Buffer.from(chunk));
        if (n > remaining) {
          fail(new Error(`GET ${what}: the object store sent more than its Content-Length`));
          return false;
        }
        remaining -= n;
        if (rest || !want) {
          // A TLS socket passes on what it has already decrypted even after it was told to stop: kept aside.
          rest = rest ? Buffer.concat([rest, chunk]) : Buffer.from(chunk);
          return false;
        }
        const left = deliver(chunk);
        // Over TLS a leftover must leave the landing buffer now (see above); over TCP nothing more is read
        // into it until the next fill, which takes the leftover first.
        rest = left && signed.tls ? Buffer.from(left) : left;
        if (remaining === 0 && !rest) socket.destroy();
        return rest === null && want !== null;
      },
    },
  };
  const socket = signed.tls
    ? tls.connect({ ...socketOpts, servername: net.isIP(signed.host) ? undefined : signed.host, ALPNProtocols: ['http/1.1'] })
    : net.connect(socketOpts);
  socket.setTimeout(CONNECT_TIMEOUT_MS);
  socket.once(signed.tls ? 'secureConnect' : 'connect', () => socket.setTimeout(idleMs));
  socket.on('timeout', () => fail(unavailable(`GET ${what}`, new Error(`no answer for ${socket.timeout! / 1000} s`))));
  socket.on('error', (err) => fail(isNetworkError(err) ? unavailable(`GET ${what}`, err) : err));
  socket.on('end', () => fail(unavailable(`GET ${what}`, new Error('the object store closed the connection early'))));
  socket.on('close', () => {
    fail(unavailable(`GET ${what}`, new Error('the object store closed the connection early')));
    signal?.removeEventListener('abort', onAbort);
    // The buffer goes back to the spares; what is left of the last read may not stay in it.
    if (rest?.buffer === landing.buffer) rest = Buffer.from(rest);
    landings.give(landing);
  });
  const onAbort = (): void => fail(new Error(`GET ${what}: aborted`));
  signal?.addEventListener('abort', onAbort, { once: true });
  const lines = Object.entries(signed.headers).map(([k, v]) => `${k}: ${v}\r\n`);
  socket.write(`GET ${signed.target} HTTP/1.1\r\n${lines.join('')}range: bytes=${start}-${end - 1}\r\nconnection: close\r\n\r\n`);

  const body: BodyFeed = {
    fill(target) {
      if (failure) return Promise.reject(failure);
      let at = 0;
      if (rest) {
        at = rest.copy(target);
        rest = at < rest.length ? rest.subarray(at) : null;
      }
      if (at === target.length || remaining === 0) {
        if (remaining === 0 && !rest) socket.destroy();
        return Promise.resolve(at);
      }
      return new Promise<number>((resolve, reject) => {
        want = {
          target,
          at,
          done: (err) => {
            const got = want!.at;
            want = null;
            if (err) reject(err);
            else resolve(got);
          },
        };
        socket.resume();
      });
    },
    get usable() {
      return failure === null;
    },
    destroy() {
      // Also after the last byte arrived: what is left of it lives in the landing buffer, which goes back to the spares.
      failure ??= new Error(`GET ${what}: closed`);
      want?.done(failure);
      socket.destroy();
    },
  };
  return new Promise<BodyFeed>((resolve, reject) => {
    answered = (err) => {
      answered = null;
      if (err) reject(err);
      else resolve(body);
    };
  });
}

/** What is wrong with a response head for bytes [start, end), or null. */
function checkHead(text: string, start: number, end: number, what: string, body: Buffer): Error | null {
  const [statusLine = '', ...lines] = text.split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0);
  const headers = new Map<string, string>();
  for (const line of lines) {
    const i = line.indexOf(':');
    if (i > 0) headers.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
  }
  if (status === 404) return new BlobError('NOT_FOUND', `${what} does not exist`);
  if (status === 416) return new BlobError('OUT_OF_RANGE', `${what}: range starts at ${start}, past its end`);
  if (status === 0) return new Error(`GET ${what}: the object store answered ${JSON.stringify(statusLine.slice(0, 40))}`);
  if (status !== 206 && status !== 200) return failedAnswer(`GET ${what}`, status, body.toString('latin1'));
  if (headers.has('transfer-encoding')) return new Error(`GET ${what}: the object store sent a ${headers.get('transfer-encoding')} body; a Content-Length is needed`);
  const length = Number(headers.get('content-length') ?? NaN);
  const range = /^bytes (\d+)-(\d+)\//.exec(headers.get('content-range') ?? '');
  const sameRange = status === 206 ? range !== null && Number(range[1]) === start && Number(range[2]) === end - 1 : start === 0;
  if (!sameRange || length !== end - start) {
    return new Error(`GET ${what}: asked for bytes ${start}-${end - 1}, the object store sent ${headers.get('content-range') ?? `HTTP ${status}`} with ${length} bytes`);
  }
  return null;
}
