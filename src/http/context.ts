import { randomBytes } from 'node:crypto';
import type { HttpRequest, HttpResponse } from './uws.ts';

/**
 * Everything a handler may use about one request. uWS's `req` is stack-allocated and dies at the
 * first await, so the context copies what handlers need up front; `res` is guarded so nothing
 * touches it after an abort or after the response ended.
 */
export interface Ctx {
  readonly res: HttpResponse;
  readonly method: string;
  readonly path: string;
  readonly query: URLSearchParams;
  readonly headers: Readonly<Record<string, string>>;
  readonly params: readonly string[];
  /** Peer address of the socket (proxy handling comes from the access layer). */
  readonly remoteIp: string;
  readonly signal: AbortSignal;
  aborted: boolean;
  /** True once the response has been ended or the client went away. */
  done: boolean;
  /** Registers a callback run once when the client aborts (at once if it already has). */
  onAbort(fn: () => void): void;
  /** Extra headers every reply of this request carries (e.g. rate-limit headers). */
  readonly replyHeaders: Array<[string, string]>;
  /** The request id: a well-formed incoming X-Request-Id, else one of ours. Sent back on every reply. */
  readonly id: string;
  /** The status written by writeHead; 0 until then. */
  status: number;
  /** Body bytes of a response handed to uWS in full (for metrics); 0 until then. */
  bytesOut: number;
  /**
   * True while request body bytes may still arrive: the request announced a body and its last
   * chunk has not reached `onBody`. See `send` for why it matters.
   */
  bodyPending: boolean;
  /**
   * Who is calling, as the server's admission resolved it before the handler ran (/api/* only). The
   * transport only carries it: what a caller is belongs to the admission it is given (auth/access.ts).
   */
  caller: unknown;
}

const REQUEST_ID_RE = /^[A-Za-z0-9._-]{1,64}$/;
// A random per-process prefix and a counter: unique across processes and restarts, no syscall per request.
const idPrefix = randomBytes(5).toString('base64url');
let idCounter = 0;

/** The caller's id when it is safe to echo and log, else a fresh one. */
export function requestId(incoming: string | undefined): string {
  if (incoming !== undefined && REQUEST_ID_RE.test(incoming)) return incoming;
  return `${idPrefix}-${(++idCounter).toString(36)}`;
}

// Headers are copied through one module-level callback rather than a closure per request.
const NO_HEADERS: Record<string, string> = {};
let collecting = NO_HEADERS;
const collectHeader = (k: string, v: string): void => {
  collecting[k] = k in collecting ? `${collecting[k]}, ${v}` : v;
};

/**
 * The context of one request. A class, so its accessors and methods live on one shared prototype:
 * a request allocates this object, its header record and little else (this runs for every request,
 * and an object literal with getters made five closures each time).
 */
class RequestCtx implements Ctx {
  readonly res: HttpResponse;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly params: string[];
  readonly replyHeaders: Array<[string, string]>;
  readonly id: string;
  aborted = false;
  done = false;
  status = 0;
  bytesOut = 0;
  bodyPending: boolean;
  caller: unknown = undefined;
  // The query string is parsed and the AbortController made only when a handler asks: most
  // requests need neither, and both cost more than the rest of the context together.
  #rawQuery: string;
  #query: URLSearchParams | undefined;
  #controller: AbortController | undefined;
  #remoteIp: string | undefined;
  #abortFns: Array<() => void> | undefined;

  constructor(res: HttpResponse, req: HttpRequest, paramCount: number) {
    const headers: Record<string, string> = {};
    collecting = headers;
    req.forEach(collectHeader);
    collecting = NO_HEADERS; // not held past the request (they may carry credentials)
    const params: string[] = [];
    for (let i = 0; i < paramCount; i++) params.push(decodeParam(req.getParameter(i)));
    this.res = res;
    this.method = req.getMethod();
    this.path = req.getUrl();
    this.#rawQuery = req.getQuery() ?? '';
    this.headers = headers;
    this.params = params;
    this.id = requestId(headers['x-request-id']);
    this.replyHeaders = [['X-Request-Id', this.id]];
    this.bodyPending = announcesBody(headers);
    res.onAborted(() => this.#abort());
  }

  get query(): URLSearchParams {
    this.#query ??= new URLSearchParams(this.#rawQuery);
    return this.#query;
  }

  // Decoded on first use (rate limiting, access tokens), while `res` is still alive.
  get remoteIp(): string {
    this.#remoteIp ??= ipText(this.res);
    return this.#remoteIp;
  }

  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    if (this.aborted) this.#controller.abort();
    return this.#controller.signal;
  }

  onAbort(fn: () => void): void {
    if (this.aborted) fn();
    else (this.#abortFns ??= []).push(fn);
  }

  #abort(): void {
    this.aborted = true;
    this.done = true;
    this.#controller?.abort();
    for (const fn of this.#abortFns?.splice(0) ?? []) {
      try {
        fn();
      } catch {
        // abort callbacks are best-effort cleanup
      }
    }
  }
}

export function createCtx(res: HttpResponse, req: HttpRequest, paramCount: number): Ctx {
  return new RequestCtx(res, req, paramCount);
}

/**
 * Where the body ends is in doubt: Content-Length sent twice (the header record joins repeats with
 * ", "), not a plain decimal, or beside Transfer-Encoding. Parsers that pick different lengths
 * would disagree on where the next request starts (request smuggling, RFC 9112 §6.3).
 */
export function ambiguousFraming(headers: Readonly<Record<string, string>>): boolean {
  const length = headers['content-length'];
  return length !== undefined && (!/^\d+$/.test(length) || headers['transfer-encoding'] !== undefined);
}

/** Whether the request carries a body: a non-zero Content-Length or any Transfer-Encoding. */
function announcesBody(headers: Record<string, string>): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && !/^0*$/.test(length.trim());
}

function decodeParam(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

function ipText(res: HttpResponse): string {
  let text: string;
  try {
    text = Buffer.from(res.getRemoteAddressAsText()).toString('latin1');
  } catch {
    return ''; // the response was already discarded: nobody is listening for this answer
  }
  // uWS writes IPv4-mapped IPv6 peers in full form; present them as plain IPv4.
  const mapped = /^(?:0{1,4}:){5}ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(text) ?? /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(text);
  return mapped ? mapped[1]! : text;
}
