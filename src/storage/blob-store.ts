import type { Readable } from 'node:stream';

/**
 * The one contract for file bytes at rest. Everything outside src/storage/ that stores, reads or
 * removes the bytes of an upload, a tus upload, a preview or a share card goes through a BlobStore;
 * only an implementation (disk.ts today, an object store next) touches files, descriptors or
 * buckets. The contract is shaped so that an object store can keep every promise: no method hands
 * out a path or a file descriptor, appends are whole requests rather than positioned writes, and
 * a key is chosen before the bytes are written (a multipart upload to S3 needs its key up front).
 *
 * Ordering rule for callers: bytes first, row second. A writer's object becomes visible only at
 * publish(), after its bytes are durable; the caller commits the database row after publish
 * resolves. A crash between the two leaves an object no row names, which listKeys() shows to the
 * sweeper once it is older than the sweeper's grace period.
 */

/** A storage key: 32 lowercase hex characters, made by the store (newKey), never by a client. */
export type BlobKey = string;

export const BLOB_KEY_RE = /^[0-9a-f]{32}$/;

/** What is known of an object once its bytes are durable. */
export interface BlobDigest {
  readonly size: number;
  /** CRC-32 of the bytes (a stored zip entry needs it; it is also the file's checksum). */
  readonly crc32: number;
  /** Lowercase hex SHA-256, or null when the writer was not asked for one (see WriteOptions.sha256). */
  readonly sha256: string | null;
}

export interface WriteOptions {
  /** Also compute the SHA-256 (costs CPU on every byte; CRC-32 is always computed). */
  readonly sha256?: boolean;
  /** Called once with the first write error, as soon as it happens (finish() rejects with it too). */
  readonly onError?: (err: Error) => void;
}

/**
 * Streams one new object. Push-style, so an HTTP body with its own pause/resume (uWS, busboy) feeds
 * it without an intermediate Readable. Memory is bounded per writer whatever the object's size.
 */
export interface BlobWriter {
  /** The key the object will be published under (made by the store when the writer was created). */
  readonly key: BlobKey;
  /**
   * Takes a chunk; what does not fit the writer's buffers is referenced until copied, never
   * modified. False: stop sending until onDrain's callback runs (the rest of a chunk in flight and
   * one more may still land without harm). `transient`: the caller reuses the chunk's memory once
   * this returns, so the writer copies whatever it cannot take at once.
   */
  write(chunk: Uint8Array, transient?: boolean): boolean;
  /** Sets the callback run once, when write() would return true again (after a false); it replaces any earlier one. */
  onDrain(fn: () => void): void;
  /** True while the writer still references a chunk given to write() (not yet copied). */
  holding(): boolean;
  /**
   * Flushes and makes the bytes durable (fsync; the parts of an S3 multipart upload), then resolves
   * with the digest. The object is NOT visible yet: see publish(). Rejects on any write error
   * (ENOSPC included); after a rejection, abort() removes what was written.
   */
  finish(): Promise<BlobDigest>;
  /**
   * Makes a finished object visible under `key`, durably (disk: rename, then the directory's fsync,
   * batched across concurrent publishes; S3: CompleteMultipartUpload). Only after this resolves may
   * a row name the key. Rejects if finish() has not resolved.
   */
  publish(): Promise<void>;
  /**
   * A SHA-256 (hex) first computed by publish(), for the row: an inspecting writer that did not hash
   * on the way reads the object back when the blocklist filled meanwhile (abuse/inspector.ts).
   */
  readonly lateSha256?: () => string | null;
  /**
   * Stops and removes everything written, published or not; safe at any time, more than once.
   * Resolves once nothing of the object is left (callers that cannot wait may ignore it).
   */
  abort(): Promise<void>;
}

/**
 * One request's bytes appended to a resumable object (a tus PATCH). Same push interface as
 * BlobWriter. Bytes past the offset acknowledged by finish() never survive: a later append or
 * complete cuts them off, even after a crash in the middle of an append.
 */
export interface BlobAppender {
  /** Offset the append started at. */
  readonly offset: number;
  write(chunk: Uint8Array, transient?: boolean): boolean;
  onDrain(fn: () => void): void;
  /**
   * Makes every byte written so far durable and resolves with the new durable offset. A body cut
   * short (the client went away) or stopped at the limit (TOO_LARGE) keeps what arrived before; a
   * failed write or sync (ENOSPC, EIO) drops the append's bytes and resolves with the offset it
   * started at, with the error. `cutTo` drops everything past that offset (a checksum mismatch).
   * `crc32`, the appended bytes' CRC-32, lets the store remember the range it synced (syncedHere).
   */
  finish(opts?: { readonly cutTo?: number; readonly crc32?: number }): Promise<{ readonly offset: number; readonly error: Error | null }>;
  /** Drops this append's bytes (durable offset stays where it started). Safe at any time. */
  abort(): void;
}

/** Bytes [from, to) of a resumable, appended and on record, whose sync is not known done; with their CRC-32. */
export interface UnsyncedRange {
  readonly from: number;
  readonly to: number;
  readonly crc32: number;
}

export interface AppendOptions {
  /** Never accept bytes past this absolute offset: a body going beyond it ends the append with TOO_LARGE (what came before stays). */
  readonly limit: number;
  /**
   * Hash the bytes as they arrive, so complete() does not read the whole object back. A resumable
   * that is only ever joined into another (a tus partial upload) skips it.
   */
  readonly hashAhead: boolean;
}

/** A random reader of one object, for the download pump (reads are submitted before they return). */
export interface BlobReader {
  readonly size: number;
  /**
   * Fills all of `target` with the bytes at `pos`; rejects with SHORT if the object ends first.
   * Concurrent reads are allowed; the object being deleted meanwhile must not crash the reader
   * (disk: the open descriptor keeps the bytes; S3: a NOT_FOUND rejection).
   */
  readInto(target: Buffer, pos: number): Promise<void>;
  close(): void;
}

/** A leftover the sweeper may remove: a writer's temp object or an unfinished resumable. */
export interface Leftover {
  readonly kind: 'temp' | 'resumable';
  /** Opaque to callers: pass to removeLeftover(); for 'resumable', the resumable's id. */
  readonly id: string;
  /** Milliseconds since it was last written. */
  readonly idleMs: number;
}

/**
 * A small area for derived files (previews, share cards): regenerable, never part of a bundle.
 * Names are `[A-Za-z0-9._/-]` with no `..`; a name that starts with a storage key belongs to that
 * object and goes with it on delete(key).
 */
export interface BlobCache {
  get(name: string): Promise<Buffer | null>;
  /** Atomic: a concurrent get() sees the old bytes, the new ones or nothing, never a part. */
  put(name: string, bytes: Uint8Array): Promise<void>;
  /** Removes entries not written for `maxAgeMs`, except those owned by a stored object; returns the count. */
  prune(maxAgeMs: number): Promise<number>;
}

export interface BlobStore {
  /** A new key for an object: random, with the store's own layout hints (disk: shard runs). */
  newKey(): BlobKey;
  /** A new writer; the key is made now (see BlobWriter.key). */
  createWriter(opts?: WriteOptions): BlobWriter;

  /** Creates an empty resumable object under `id` (a 32-hex id the caller made); exclusive. */
  createResumable(id: string): Promise<void>;
  /**
   * Starts an append at `offset`, which must be the durable offset the caller holds on record;
   * anything past it is cut off first. Rejects with BUSY while another append to `id` is open in
   * this store (two at once: exactly one gets to write). Cross-process exclusion is the caller's
   * (tus holds the upload's lock: db/upload-locks.ts).
   */
  append(id: string, offset: number, opts: AppendOptions): Promise<BlobAppender>;
  /** Appends the first `length` bytes of each of `sources` (other resumables) to `id`, durably, in order. */
  join(id: string, sources: ReadonlyArray<{ readonly id: string; readonly length: number }>): Promise<void>;
  /**
   * Turns the first `size` bytes of a resumable into a published object under a new key and
   * returns it with the digest; the resumable is gone. Rejects with SHORT if it holds fewer bytes.
   */
  completeResumable(id: string, size: number): Promise<{ readonly key: BlobKey; readonly digest: BlobDigest }>;
  /**
   * Undoes completeResumable when the row commit failed, so the upload can be completed again.
   * Best effort: if it fails, the published object is an orphan for the sweeper.
   */
  reopenResumable(id: string, key: BlobKey): Promise<void>;
  /** Removes a resumable; missing is fine. */
  removeResumable(id: string): Promise<void>;
  /**
   * The caller recorded `offset`, where its own append to resumable `id` just ended, as the durable
   * offset. A store that keeps a digest of the bytes it appended (S3) trusts it from then on:
   * unrecorded, they may be appended again elsewhere, with other bytes.
   */
  recorded?(id: string, offset: number): void;
  /**
   * Stores whose appends can go on record before they are synced (disk) have these two; for the
   * others an acknowledged append is already durable (S3: a part is stored when its upload returns).
   * Whether this store synced `range` of resumable `id` itself (its last append, or a check), since it started.
   */
  syncedHere?(id: string, range: UnsyncedRange): boolean;
  /**
   * Whether `range` of resumable `id` is durable and holds the bytes its CRC-32 names: true at once
   * if syncedHere; else the range is read back and compared, and a match is synced before it counts.
   */
  checkUnsynced?(id: string, range: UnsyncedRange): Promise<boolean>;

  /**
   * A random reader over a published object; rejects with NOT_FOUND. `size`: the object's size as
   * its row records it, when the caller knows it; a store may then skip asking (S3: no HEAD per zip
   * entry): the reader's `size` is then that number, a missing object rejects with NOT_FOUND at the
   * first read instead, and one shorter than said with SHORT.
   */
  open(key: BlobKey, opts?: { size?: number }): Promise<BlobReader>;
  /**
   * Bytes [start, end) as a stream with bounded memory (end defaults to the object's size). A start
   * past the end rejects with OUT_OF_RANGE; start === size gives an empty stream; an end past the
   * size is clamped to it.
   */
  read(key: BlobKey, range?: { readonly start?: number; readonly end?: number }): Promise<Readable>;
  /** Removes a published object and the cache entries it owns; missing is fine. */
  delete(key: BlobKey): Promise<void>;
  /**
   * Runs `fn` with a local file holding the object's bytes, for a decoder that needs random access
   * by path (libvips): disk passes the stored file itself, an object store a temporary download that
   * goes once `fn` settles. Rejects with NOT_FOUND.
   */
  withLocalFile<T>(key: BlobKey, fn: (path: string) => Promise<T>): Promise<T>;

  /** Leftovers idle for at least `idleMs`; a live writer's temp objects are never listed. */
  listLeftovers(idleMs: number): Promise<Leftover[]>;
  removeLeftover(leftover: Leftover): Promise<void>;
  /**
   * Published keys whose object was last written at least `olderThanMs` ago, in batches, so the
   * sweeper can find the ones no row names (a crash between publish and the row commit).
   */
  listKeys(olderThanMs: number): AsyncIterable<readonly BlobKey[]>;
  /** Removes every temp object this process created (shutdown, once no writer is live). */
  removeOwnTemps(): Promise<number>;

  readonly cache: BlobCache;
  /** Whether direct (cache-bypassing) writes are in use, for /readyz and tests. */
  readonly fastPath: () => boolean;
  close(): Promise<void>;
}

