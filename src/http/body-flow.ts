import fs from 'node:fs';
import type { Ctx } from './context.ts';
import { appendSpill, closeSpill, openSpill, waiting, type Spill } from './body-spill.ts';
import { spareBuffers } from '../util/spare-buffers.ts';

/**
 * Takes one body chunk. `chunk` is uWS's memory or a reused buffer of the queue: a reader copies
 * what it keeps before it returns.
 */
export type BodyReader = (chunk: Buffer, isLast: boolean) => void;

/**
 * Body bytes one request may keep in memory while its reader is paused, and all requests together.
 * What arrives past either goes to the request's spill file (below), so a pause costs at most this
 * much memory whatever the socket delivers.
 */
export const MEMORY_LIMIT_BYTES = 1024 * 1024;
export const TOTAL_MEMORY_LIMIT_BYTES = 16 * 1024 * 1024;
/**
 * Unread bytes one request's spill file may hold. A read loop stops at a short read: a pause lets
 * through about one kernel receive buffer (tens of MiB), unless the client sends as fast as the
 * spill is written (a local proxy). Past this bound the request is cut off rather than the server
 * held up any longer.
 */
export const SPILL_LIMIT_BYTES = 1024 * 1024 * 1024;
/** uWS hands over at most this much at a time; queued chunks and spill reads use buffers of it. */
const PIECE_BYTES = 512 * 1024;
/** Reused: fresh copies per queued chunk were garbage that raised peak RSS by tens of MiB per upload. */
const pieces = spareBuffers('body-queue', PIECE_BYTES, TOTAL_MEMORY_LIMIT_BYTES / PIECE_BYTES);

interface Flow {
  reader: BodyReader | null;
  /** The reader asked for no more (or has not registered yet). */
  paused: boolean;
  /** Copies of chunks that arrived while the reader could not take them, in order. */
  readonly queue: Array<{ readonly buf: Buffer; readonly len: number; readonly last: boolean }>;
  queued: number;
  spill: Spill | null;
  delivering: boolean;
  /**
   * This module paused the socket and has not resumed it. uWS's pause and resume must pair: a
   * resume of a socket that was never paused restores poll events saved by another socket's pause
   * (or none), and can leave a kept-alive connection unread for good.
   */
  socketPaused: boolean;
  /** Nothing more of the body is wanted (dropBody, an overrun). */
  discard: boolean;
  /** Called once when the spill passes its bound; the request is then cut off. */
  onOverrun: (() => void) | null;
  /** Body bytes that arrived from the socket so far, and how many the reader can ever accept. */
  received: number;
  limit: number;
  onLimit: (() => void) | null;
}

const flows = new WeakMap<Ctx, Flow>();
const stats = { queued: 0, spilled: 0, overruns: 0 };

/** Body bytes queued in memory now, bytes ever spilled, requests cut off (metrics). */
export function bodyFlowStats(): Readonly<typeof stats> {
  return { ...stats };
}

/**
 * The one path request body bytes take from uWS to a reader. uWS's `pause()` stops polling the
 * socket, but builds of uWS from v20.59 on (the binaries for Node 22 and later) go on reading while
 * each read fills their buffer, and hand every byte to onData even while paused: tens of MiB per
 * pause on a fast client. So a reader here never sees a chunk while it is paused. What arrives
 * meanwhile is queued in arrival order: in memory up to a small bound per request and in all, past
 * it in the request's spill file (written at once, read back as the reader takes it), so memory per
 * request stays bounded on every build. The socket resumes only once the queue is empty.
 */
function flowOf(ctx: Ctx): Flow {
  let flow = flows.get(ctx);
  if (flow) return flow;
  const f: Flow = { reader: null, paused: true, queue: [], queued: 0, spill: null, delivering: false, socketPaused: false, discard: false, onOverrun: null,
    received: 0, limit: Infinity, onLimit: null };
  flow = f;
  flows.set(ctx, f);
  if (ctx.bodyPending) pauseSocket(ctx, f);
  ctx.res.onData((ab, isLast) => {
    if (isLast) ctx.bodyPending = false;
    // Answered or gone: nothing reads the rest (send() leaves the closing to the client).
    if (ctx.done || f.discard) return drop(f);
    // Counted as it arrives, not as the reader takes it: a body that cannot fit is refused at
    // once, not after what waited in the queue was read back.
    f.received += ab.byteLength;
    if (f.received > f.limit) return pastLimit(f);
    if (f.reader && !f.paused && f.queue.length === 0 && !waiting(f.spill)) return f.reader(Buffer.from(ab), isLast);
    enqueue(ctx, f, ab, isLast);
    // The whole body is in: the socket is not kept paused for a reader that may never come.
    if (isLast && !ctx.done) resumeSocket(ctx, f);
  });
  ctx.onAbort(() => drop(f));
  return f;
}

function enqueue(ctx: Ctx, f: Flow, ab: ArrayBuffer, isLast: boolean): void {
  const n = ab.byteLength;
  if (!waiting(f.spill) && n <= PIECE_BYTES && f.queued + n <= MEMORY_LIMIT_BYTES && stats.queued + n <= TOTAL_MEMORY_LIMIT_BYTES) {
    const buf = pieces.take();
    buf.set(new Uint8Array(ab)); // uWS reuses `ab` once this returns
    f.queue.push({ buf, len: n, last: isLast });
    f.queued += n;
    stats.queued += n;
    return;
  }
  try {
    const s = (f.spill ??= openSpill());
    appendSpill(s, ab, isLast);
    stats.spilled += n;
    if (s.writeAt - s.readAt > SPILL_LIMIT_BYTES) overrun(ctx, f);
  } catch {
    overrun(ctx, f);
  }
}

function drop(f: Flow): void {
  stats.queued -= f.queued;
  f.queued = 0;
  for (const c of f.queue.splice(0)) pieces.give(c.buf);
  const s = f.spill;
  f.spill = null;
  // A read in flight still uses the file and its buffer: that read's callback releases them.
  if (s && !s.reading) release(s);
}

function release(s: Spill): void {
  closeSpill(s);
  if (s.piece) pieces.give(s.piece);
  s.piece = null;
}

/** Nothing more of the body is wanted: what is queued is freed, what still comes is dropped. */
function stop(f: Flow): void {
  drop(f);
  f.reader = null;
  f.discard = true;
}

function overrun(ctx: Ctx, f: Flow): void {
  stats.overruns++;
  stop(f);
  const fn = f.onOverrun;
  f.onOverrun = null;
  if (fn) fn();
  else if (!ctx.done) {
    ctx.done = true;
    ctx.res.close();
  }
}

function pastLimit(f: Flow): void {
  stop(f);
  const fn = f.onLimit;
  f.onLimit = null;
  fn?.();
}

/** Hands queued chunks to the reader while it takes them; resumes the socket once none is left. */
function deliver(ctx: Ctx, f: Flow): void {
  if (f.delivering) return;
  f.delivering = true;
  try {
    while (!f.paused && f.reader && !ctx.done && !f.discard) {
      const c = f.queue.shift();
      if (c) {
        f.queued -= c.len;
        stats.queued -= c.len;
        try {
          f.reader(c.buf.subarray(0, c.len), c.last);
        } finally {
          pieces.give(c.buf);
        }
      } else {
        if (waiting(f.spill)) readSpill(ctx, f);
        break;
      }
    }
  } finally {
    f.delivering = false;
  }
  if (!f.paused && f.queue.length === 0 && !waiting(f.spill) && !ctx.done) resumeSocket(ctx, f);
}

function pauseSocket(ctx: Ctx, f: Flow): void {
  if (f.socketPaused || !ctx.bodyPending || ctx.done || ctx.aborted) return;
  f.socketPaused = true;
  ctx.res.pause();
}

function resumeSocket(ctx: Ctx, f: Flow): void {
  if (!f.socketPaused || ctx.aborted) return;
  f.socketPaused = false;
  ctx.res.resume();
}

/** Reads the next piece of the spill file and hands it over, then goes on delivering. */
function readSpill(ctx: Ctx, f: Flow): void {
  const s = f.spill!;
  if (s.reading) return;
  s.reading = true;
  const n = Math.min(PIECE_BYTES, s.writeAt - s.readAt);
  const piece = (s.piece ??= pieces.take());
  fs.read(s.fd, piece, 0, n, s.readAt, (err, got) => {
    s.reading = false;
    if (f.spill !== s) return release(s); // dropped meanwhile
    if (f.discard || ctx.done) return;
    if (err || got !== n) return overrun(ctx, f);
    s.readAt += n;
    const last = s.lastAt === s.readAt;
    const drained = s.readAt === s.writeAt;
    if (drained) {
      // The file is written from its start again by the next pause; its buffer waits in the spares.
      s.readAt = s.writeAt = 0;
      s.lastAt = null;
      s.piece = null;
    }
    try {
      f.reader?.(piece.subarray(0, n), last);
    } finally {
      if (drained) pieces.give(piece);
    }
    deliver(ctx, f);
  });
}

/**
 * Takes the request's body before its reader exists (the server admits the caller first, which
 * waits on the database or Redis; uWS drops body bytes, and the empty last chunk of a request
 * without a body, that arrive with no onData registered). The body stays paused, its bytes queued,
 * until a reader registers and resumes it.
 */
export function holdBody(ctx: Ctx): void {
  flowOf(ctx);
}

/**
 * Registers the request's body reader. Chunks held so far reach it first. The body stays paused
 * until `resumeBody` (or at once with `flowing`, for a reader that never pauses). Every body
 * reader goes through here, so none can skip the bookkeeping.
 */
export function onBody(ctx: Ctx, reader: BodyReader, flowing = false): void {
  const f = flowOf(ctx);
  f.reader = reader;
  if (flowing) resumeBody(ctx);
}

/** The reader takes no more for now. Chunks that still arrive wait in the queue. */
export function pauseBody(ctx: Ctx): void {
  const f = flowOf(ctx);
  f.paused = true;
  pauseSocket(ctx, f);
}

/** The reader takes chunks again: queued ones first, then the socket's. */
export function resumeBody(ctx: Ctx): void {
  const f = flowOf(ctx);
  f.paused = false;
  deliver(ctx, f);
}

/** Nothing more of this body is wanted: what is queued is freed, what still comes is dropped. */
export function dropBody(ctx: Ctx): void {
  const f = flows.get(ctx);
  if (f) stop(f);
}

/**
 * Called instead of a bare close when this request's spill passes its bound, so its reader can
 * fail the request (and clean up) and answer before the connection goes.
 */
export function onBodyOverrun(ctx: Ctx, fn: () => void): void {
  flowOf(ctx).onOverrun = fn;
}

/**
 * The reader can take a body of at most `bytes` in all (a bundle's room plus the most a form can
 * add): past them `fn` runs once, as soon as they arrived, and the rest of the body is dropped.
 * At once if they already have.
 */
export function limitBody(ctx: Ctx, bytes: number, fn: () => void): void {
  const f = flowOf(ctx);
  f.limit = bytes;
  f.onLimit = fn;
  if (f.received > f.limit) pastLimit(f);
}
