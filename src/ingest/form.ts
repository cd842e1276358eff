import type { Readable } from 'node:stream';
import type { Busboy } from 'busboy';
import type { Ctx } from '../http/context.ts';
import { dropBody, pauseBody, resumeBody } from '../http/body-flow.ts';
import type { BlobStore, BlobWriter } from '../storage/blob-store.ts';
import type { IngestResult } from './ingest-types.ts';
import type { BusboyInner } from './fast-paths.ts';
import type { Metrics } from '../metrics/metrics.ts';

/** How a file stream we write to takes its bytes; `transient`: they are uWS's memory (straightToFile). */
export type Sink = (chunk: Buffer, transient: boolean) => void;

/** One multipart body as it streams (multipart.ts): what its steps share. */
export interface Form {
  readonly ctx: Ctx;
  readonly store: BlobStore;
  readonly bb: Busboy | null;
  // Without busboy's internals (unknown versions): no chunk skips busboy and none is pooled.
  readonly inner: BusboyInner | null;
  readonly metrics: Metrics | undefined;
  started: boolean;
  finished: boolean;
  readonly writers: BlobWriter[];
  /**
   * Pooled chunks fed so far that something may still reference. They go back at the next chunk after
   * which nothing references any (backpressure keeps them few), or once busboy closed and every file
   * was written; after a failure they are left to the GC.
   */
  readonly lent: Buffer[];
  /** File streams we consume, until they end: a paused or not yet flowing one buffers slices. */
  readonly kept: Set<Readable>;
  /** How each file stream we write to takes its bytes, for straightToFile. */
  readonly sinks: Map<Readable, Sink>;
  /**
   * Why the socket is paused: busboy's queue, or a part writer short of room. Writers pause the
   * socket directly, not their file stream, so busboy never queues a slice of a pooled chunk.
   */
  readonly stalls: Set<object>;
  /** Stops watching for a body that ends inside a part (see feed). */
  stopWatch: () => void;
  /** The promise start() returns. */
  resolve: (r: IngestResult) => void;
  reject: (e: unknown) => void;
}

export function newForm(ctx: Ctx, store: BlobStore, bb: Busboy | null, inner: BusboyInner | null, metrics: Metrics | undefined): Form {
  return {
    ctx, store, bb, inner, metrics, started: false, finished: false, writers: [], lent: [], kept: new Set(), sinks: new Map(),
    stalls: new Set(), stopWatch: () => {}, resolve: () => {}, reject: () => {},
  };
}

export function stall(f: Form, why: object): void {
  f.stalls.add(why);
  pauseBody(f.ctx);
}

export function unstall(f: Form, why: object): void {
  f.stalls.delete(why);
  if (f.stalls.size === 0 && f.started && !f.finished && !f.ctx.done) resumeBody(f.ctx);
}

export function fail(f: Form, err: unknown): void {
  f.stopWatch();
  if (f.finished) return;
  f.finished = true;
  for (const w of f.writers) w.abort().catch(() => {});
  const { bb } = f;
  bb?.removeAllListeners();
  bb?.on('error', () => {});
  bb?.destroy();
  // Nothing more is read: the reply pauses the socket and leaves the closing to the client (see send).
  f.stalls.clear();
  pauseBody(f.ctx);
  dropBody(f.ctx);
  f.reject(err);
}
