import { Worker } from 'node:worker_threads';
import os from 'node:os';
import { fromRoot } from '../paths.ts';

/**
 * What is computed of every stored file: its CRC-32. A stored (uncompressed) zip entry needs it, so
 * `/zip` streams without reading a file twice, and it is the file's checksum. A SHA-256 costs
 * more CPU than the CRC-32 on every byte (bench/RESULTS.md), so a writer computes one only when asked
 * (WriteOptions.sha256); the download ETag does not need it (an immutable file's row is as strong a
 * validator: fileTag in routes/download.ts).
 */
export interface Digest {
  readonly crc32: number;
}

export interface HashStream {
  /** Hashes `len` bytes of `buf`, which is transferred away; `onAck` gets it back when done. */
  update(buf: ArrayBuffer, len: number, slot: number): void;
  digest(): Promise<Digest>;
  discard(): void;
}

export interface FileDigest extends Digest {
  readonly size: number;
}

export interface Hasher {
  open(onAck: (slot: number, buf: ArrayBuffer) => void): HashStream;
  /**
   * CRC-32 and size of a whole file, read and checksummed by a worker in 1 MiB pieces. With a
   * `key`, continues from what hashAhead(key, …) already hashed.
   */
  digestFile(path: string, key?: string): Promise<FileDigest>;
  /**
   * Hashes a growing file's first `upto` bytes in the background (bytes below `upto` must never
   * change again), so digestFile(path, key) at the end reads only the rest.
   */
  hashAhead(key: string, path: string, upto: number): void;
  /**
   * Hashes ahead from memory: `len` bytes of `buf` (transferred away, given back to `back`) that
   * are being written at `at` of the file followed under `key`. They count only if the state has
   * reached exactly `at`; the hashAhead(key, …, upto) that must follow every such run of writes
   * names the durable offset, and a state that went past it starts over.
   */
  feedAhead(key: string, at: number, buf: ArrayBuffer, len: number, back: (buf: ArrayBuffer) => void): void;
  close(): Promise<void>;
}

type Msg =
  | { t: 'ack'; id: number; slot: number; buf: ArrayBuffer }
  | { t: 'digest'; id: number; crc32: number }
  | { t: 'file'; id: number; crc32: number; size: number; error?: undefined }
  | { t: 'file'; id: number; error: string; code?: string };

/**
 * A small pool of worker threads computing the CRC-32 of streamed bytes, so checksumming overlaps
 * disk writes instead of adding to the event loop's work. Buffers move by transfer both ways (no copies).
 */
export function createHasher(size = Math.max(1, Math.min(4, os.availableParallelism() - 1))): Hasher {
  const workers: Worker[] = [];
  const acks = new Map<number, (slot: number, buf: ArrayBuffer) => void>();
  const digests = new Map<number, (d: Digest) => void>();
  const files = new Map<number, { resolve: (d: FileDigest) => void; reject: (err: Error) => void }>();
  let nextId = 1;
  for (let i = 0; i < size; i++) {
    const w = new Worker(fromRoot('src/storage/hash-worker.mjs'));
    w.unref();
    w.on('message', (m: Msg) => {
      if (m.t === 'ack') acks.get(m.id)?.(m.slot, m.buf);
      else if (m.t === 'file') {
        const job = files.get(m.id);
        files.delete(m.id);
        if (m.error !== undefined) job?.reject(Object.assign(new Error(m.error), { code: m.code }));
        else job?.resolve({ crc32: m.crc32, size: m.size });
      } else {
        const done = digests.get(m.id);
        digests.delete(m.id);
        acks.delete(m.id);
        done?.({ crc32: m.crc32 });
      }
    });
    w.on('error', (err) => {
      // A dead hasher would silently stall uploads; crash loudly instead.
      throw err;
    });
    workers.push(w);
  }
  /** One key always goes to the same worker, which holds its state. */
  const workerOf = (key: string): Worker => {
    let h = 0;
    for (let i = 0; i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) >>> 0;
    return workers[h % workers.length]!;
  };
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
    digestFile(path, key) {
      const id = nextId++;
      return new Promise<FileDigest>((resolve, reject) => {
        files.set(id, { resolve, reject });
        const worker = key === undefined ? workers[id % workers.length]! : workerOf(key);
        worker.postMessage({ t: 'file', id, path, key });
      });
    },
    hashAhead(key, path, upto) {
      workerOf(key).postMessage({ t: 'ahead', key, path, upto });
    },
    feedAhead(key, at, buf, len, back) {
      const id = nextId++;
      acks.set(id, (_slot, returned) => {
        acks.delete(id);
        back(returned);
      });
      workerOf(key).postMessage({ t: 'feed', id, key, at, buf, len }, [buf]);
    },
    close: async () => {
      await Promise.all(workers.map((w) => w.terminate()));
    },
  };
}
