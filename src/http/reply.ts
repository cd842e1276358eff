import { STATUS_CODES } from 'node:http';
import type { Ctx } from './context.ts';
import { AppError } from '../errors.ts';

const statusLines = new Map<number, string>();
export function statusLine(status: number): string {
  let line = statusLines.get(status);
  if (line === undefined) {
    line = `${status} ${STATUS_CODES[status] ?? 'Unknown'}`;
    statusLines.set(status, line);
  }
  return line;
}

/** Writes status and headers (request-wide ones first). Call inside cork. */
export function writeHead(ctx: Ctx, status: number, headers: Iterable<readonly [string, string]> = []): void {
  const res = ctx.res;
  ctx.status = status;
  res.writeStatus(statusLine(status));
  for (const [k, v] of ctx.replyHeaders) res.writeHeader(k, v);
  for (const [k, v] of headers) res.writeHeader(k, v);
}

/**
 * Ends the response once, corked; a no-op after abort or a previous end.
 *
 * A reply sent while request body bytes are still arriving (a refused upload, a tus PATCH answered
 * before its body) pauses the socket, says `Connection: close` and leaves the closing to the client
 * or, failing that, to uWS's idle timeout (about 10 s, re-armed by the end of the response). The
 * two alternatives are both worse:
 * - uWS's own close at once: the unread bytes make the kernel answer with an RST, which can
 *   destroy the reply in the client before it is read (Node's http client reported EPIPE instead
 *   of the 400 in 7 of 30 uploads over the cap);
 * - reading on and dropping the body: unbounded (a chunked body never ends), and once its last
 *   chunk arrives after the response, uWS 20.30 switches the idle timeout off for good.
 * A request that itself said `Connection: close` is still closed at once by uWS.
 */
export function send(
  ctx: Ctx,
  status: number,
  body: string | Uint8Array,
  headers: Iterable<readonly [string, string]> = [],
  closeConnection = false,
): void {
  if (ctx.done) return;
  ctx.done = true;
  const early = ctx.bodyPending;
  ctx.res.cork(() => {
    writeHead(ctx, status, headers);
    if (early) {
      ctx.res.pause();
      ctx.res.writeHeader('Connection', 'close');
    }
    // Strings go out as UTF-8 bytes we encode: the uWS build for Node 22 and later writes a string
    // that V8 holds one byte per character (Latin-1, such as "·") as those raw bytes.
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    // HEAD gets the headers a GET would, never the bytes: a body would corrupt a kept-alive connection.
    if (ctx.method === 'head') endHead(ctx, bytes.length);
    else {
      ctx.bytesOut = bytes.length;
      ctx.res.end(bytes, closeConnection && !early);
    }
  });
}

/**
 * Ends a HEAD response announcing `length` bytes. uWS 20.30's endWithoutBody(length) waits for
 * bytes that never come and then drops the connection, so the header is written by hand.
 */
export function endHead(ctx: Ctx, length: number | null): void {
  if (length !== null) ctx.res.writeHeader('Content-Length', String(length));
  // No arguments at all: an explicit `undefined` length is read as 2^63.
  ctx.res.endWithoutBody();
}

/** Status and headers only (a 304, or the answer to a HEAD), announcing `length` body bytes. */
export function sendHeaders(ctx: Ctx, status: number, headers: Iterable<readonly [string, string]>, length: number | null): void {
  if (ctx.done) return;
  ctx.done = true;
  ctx.res.cork(() => {
    writeHead(ctx, status, headers);
    endHead(ctx, length);
  });
}

/**
 * RFC 9110 §13.2.2, steps 1 and 2: false when If-Match names neither `etag` (compared strongly) nor
 * `*`, or, without If-Match, when the representation was modified after If-Unmodified-Since (a
 * resource without a date ignores it; so does an unparsable date). A client resuming with these
 * instead of If-Range must get 412, not bytes of another version spliced onto its copy.
 */
export function preconditionsHold(h: Readonly<Record<string, string>>, etag: string, modified?: Date): boolean {
  const ifMatch = h['if-match'];
  if (ifMatch !== undefined) return ifMatch.split(',').some((t) => t.trim() === '*' || t.trim() === etag);
  const ius = h['if-unmodified-since'];
  if (ius === undefined || modified === undefined) return true;
  const since = Date.parse(ius);
  return !Number.isFinite(since) || Math.floor(modified.getTime() / 1000) <= Math.floor(since / 1000);
}

/** True when If-None-Match names `etag` (weak or strong) or is `*`. */
export const etagMatches = (ifNoneMatch: string | undefined, etag: string): boolean =>
  ifNoneMatch !== undefined && ifNoneMatch.split(',').some((t) => t.trim().replace(/^W\//, '') === etag || t.trim() === '*');

/**
 * Every JSON answer: it is per caller (a locked bundle lists its files only to a credential, and
 * the rate-limit headers count this caller's requests), so no cache between client and server may
 * keep it and hand it to somebody else.
 */
export const JSON_HEADERS = [
  ['Content-Type', 'application/json; charset=utf-8'],
  ['Cache-Control', 'no-store'],
] as const;

export function sendJson(ctx: Ctx, status: number, obj: unknown, closeConnection = false): void {
  send(ctx, status, JSON.stringify(obj), JSON_HEADERS, closeConnection);
}

/** Seconds a 503 asks its client to wait before trying again. */
const RETRY_AFTER_503_S = 5;

export function sendError(
  ctx: Ctx,
  err: AppError,
  closeConnection = false,
  headers: Iterable<readonly [string, string]> = [],
): void {
  // A route's own Cache-Control (a download's 412 or 416 keeps the file's) replaces the default.
  const own = [...err.headers, ...headers];
  const cached = own.some(([k]) => k.toLowerCase() === 'cache-control');
  const extra: Array<readonly [string, string]> = [...JSON_HEADERS.filter(([k]) => !cached || k !== 'Cache-Control'), ...own];
  // Every 503 is a passing state (a stalled store, a full queue, a shutdown): the client is told when to come back.
  const retry = (h: readonly [string, string]): boolean => h[0].toLowerCase() === 'retry-after';
  if (err.status === 503 && !own.some(retry) && !ctx.replyHeaders.some(retry)) extra.push(['Retry-After', String(RETRY_AFTER_503_S)]);
  send(ctx, err.status, JSON.stringify({ success: false, error: err.message, code: err.code }), extra, closeConnection);
}
