import { Worker } from 'node:worker_threads';
import os from 'node:os';

export interface Digest {
  readonly sha256: string;
}

export interface HashStream {
  /** Hash `len` bytes of the shared buffer; `onDone` runs when the worker no longer reads it. */
  update(sab: SharedArrayBuffer, len: number, slot: number): void;
  digest(): Promise<Digest>;
  discard(): void;
}

export interface Hasher {
  open(onAck: (slot: number) => void): HashStream;
  close(): Promise<void>;
}

type Msg =
  | { t: 'ack'; id: number; slot: number }
  | { t: 'digest'; id: number; sha256: string };

/**
 * A small pool of worker threads computing SHA-256 of streamed bytes, so hashing
 * overlaps disk writes instead of halving upload throughput on the event loop.
 */
export function createHasher(size = Math.max(1, Math.min(4, os.availableParallelism() - 1))): Hasher {
  const workers: Worker[] = [];
  const acks = new Map<number, (slot: number) => void>();
  const digests = new Map<number, (d: Digest) => void>();
  let nextId = 1;
  for (let i = 0; i < size; i++) {
    const w = new Worker(new URL('./hash-worker.mjs', import.meta.url));
    w.unref();
    w.on('message', (m: Msg) => {
      if (m.t === 'ack') acks.get(m.id)?.(m.slot);
      else {
        const done = digests.get(m.id);
        digests.delete(m.id);
        acks.delete(m.id);
        done?.({ sha256: m.sha256 });
      }
    });
    w.on('error', (err) => {
      // A dead hasher would silently stall uploads; crash loudly instead.
      throw err;
    });
    workers.push(w);
  }
  return {
    open(onAck) {
      const id = nextId++;
      const worker = workers[id % workers.length]!;
      acks.set(id, onAck);
      return {
        update: (sab, len, slot) => worker.postMessage({ t: 'd', id, sab, len, slot }),
        digest: () =>
          new Promise<Digest>((resolve) => {
            digests.set(id, resolve);
            worker.postMessage({ t: 'f', id });
          }),
        discard: () => {
          acks.delete(id);
          worker.postMessage({ t: 'x', id });
        },
      };
    },
    close: async () => {
      await Promise.all(workers.map((w) => w.terminate()));
    },
  };
}
