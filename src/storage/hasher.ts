import { Worker } from 'node:worker_threads';
import os from 'node:os';
import { fromRoot } from '../paths.ts';

export interface Digest {
  readonly sha256: string;
  readonly crc32: number;
}

export interface HashStream {
  /** Hashes `len` bytes of `buf`, which is transferred away; `onAck` gets it back when done. */
  update(buf: ArrayBuffer, len: number, slot: number): void;
  digest(): Promise<Digest>;
  discard(): void;
}

export interface Hasher {
  open(onAck: (slot: number, buf: ArrayBuffer) => void): HashStream;
  close(): Promise<void>;
}

type Msg =
  | { t: 'ack'; id: number; slot: number; buf: ArrayBuffer }
  | { t: 'digest'; id: number; sha256: string; crc32: number };

/**
 * A small pool of worker threads computing SHA-256 and CRC-32 of streamed bytes, so hashing
 * overlaps disk writes instead of halving upload throughput on the event loop. Buffers move by
 * transfer both ways (no copies).
 */
export function createHasher(size = Math.max(1, Math.min(4, os.availableParallelism() - 1))): Hasher {
  const workers: Worker[] = [];
  const acks = new Map<number, (slot: number, buf: ArrayBuffer) => void>();
  const digests = new Map<number, (d: Digest) => void>();
  let nextId = 1;
  for (let i = 0; i < size; i++) {
    const w = new Worker(fromRoot('src/storage/hash-worker.mjs'));
    w.unref();
    w.on('message', (m: Msg) => {
      if (m.t === 'ack') acks.get(m.id)?.(m.slot, m.buf);
      else {
        const done = digests.get(m.id);
        digests.delete(m.id);
        acks.delete(m.id);
        done?.({ sha256: m.sha256, crc32: m.crc32 });
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
        update: (buf, len, slot) => worker.postMessage({ t: 'd', id, buf, len, slot }, [buf]),
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
