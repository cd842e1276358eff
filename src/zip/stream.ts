import type { Ctx } from '../http/context.ts';
import { streamBody, type BodySource } from '../http/body-pump.ts';
import type { BlobReader, BlobStore } from '../storage/blob-store.ts';
import { eachLimited } from '../util/limit.ts';
import { findSegment, segmentLength, type ZipLayout } from './layout.ts';

/**
 * Sends bytes [start, start + length) of a ZIP layout as the response body: header bytes are copied
 * from the layout, entry data is read from the stored object `keys[index]` at the right offset. Chunks mix both,
 * so an archive of many small files still goes out in 1 MiB writes. Nothing is computed per byte
 * (the CRC-32s come from upload time); memory is the two 1 MiB pump buffers plus the layout.
 * Resolves true when the whole range was handed to uWS, false if the client went away.
 */
export function sendZipRange(
  ctx: Ctx,
  store: Pick<BlobStore, 'open'>,
  layout: ZipLayout,
  keys: readonly string[],
  status: number,
  headers: Array<[string, string]>,
  start: number,
  length: number,
  /** Wraps the archive's source (a limited bundle's credit, see bundles/limits.ts). */
  wrap: (source: BodySource) => BodySource = (s) => s,
): Promise<boolean> {
  if (start < 0 || length < 0 || start + length > layout.size) throw new RangeError('range outside the archive');
  return streamBody(ctx, status, headers, length, wrap(zipSource(store, layout, keys, start)));
}

/**
 * Entries read at once by one read of the archive: a span of small files then costs about one round
 * trip to the store rather than one per file (an S3 GET each), with each read going straight into
 * its place in the caller's buffer.
 */
const ENTRY_READS_AT_ONCE = 8;

/**
 * Entries one read of the archive covers at most; it sends what it has and the next read goes on.
 * Without a bound the first read of a zip of thousands of small files read them all before its first
 * byte went out, which on a slow store took longer than the server waits before answering 503.
 */
const ENTRIES_PER_READ = 4 * ENTRY_READS_AT_ONCE;

/** The part of one entry's object a read of the archive needs, and where it goes. */
interface EntryRead {
  readonly index: number;
  /** The entry's size (its row's), so the store need not ask for it. */
  readonly size: number;
  readonly out: Buffer;
  readonly filePos: number;
  /** The read reaches the entry's end: its object is not needed after it. */
  readonly toEnd: boolean;
}

/**
 * A BodySource over the archive from `start`. An entry that a read leaves unfinished stays open for
 * the next read, which continues it; the others are opened, read and closed within the read.
 */
export function zipSource(store: Pick<BlobStore, 'open'>, layout: ZipLayout, keys: readonly string[], start: number): BodySource {
  let closed = false;
  let open: { index: number; reader: BlobReader } | null = null;

  const release = (): void => {
    open?.reader.close();
    open = null;
  };

  const readEntry = async (r: EntryRead): Promise<void> => {
    const held = open;
    if (held?.index === r.index) {
      // Submitted before the first await, so the read overlaps the send that follows.
      await held.reader.readInto(r.out, r.filePos);
      if (r.toEnd) {
        held.reader.close();
        if (open === held) open = null;
      }
      return;
    }
    const key = keys[r.index];
    if (key === undefined) throw new Error(`no file for zip entry ${r.index}`);
    const reader = await store.open(key, { size: r.size });
    if (closed) {
      reader.close();
      throw new Error('zip source closed');
    }
    try {
      await reader.readInto(r.out, r.filePos);
    } catch (err) {
      reader.close();
      throw err;
    }
    if (r.toEnd) reader.close();
    // Only a read's last entry can go on past it; an entry open before closes itself when its read ends.
    else open = { index: r.index, reader };
  };

  return {
    async read(target, bodyPos) {
      if (closed) throw new Error('zip source closed');
      let pos = start + bodyPos;
      const stop = pos + target.length;
      let filled = 0;
      const reads: EntryRead[] = [];
      for (let i = findSegment(layout, pos); pos < stop; i++) {
        const seg = layout.segments[i];
        if (seg === undefined) throw new RangeError('read past the end of the archive');
        if (seg.kind === 'file' && reads.length === ENTRIES_PER_READ) break;
        const into = seg.start + segmentLength(seg) - pos;
        const take = Math.min(stop - pos, into);
        const out = target.subarray(filled, filled + take);
        if (seg.kind === 'bytes') seg.bytes.copy(out, 0, pos - seg.start, pos - seg.start + take);
        else reads.push({ index: seg.index, size: seg.offset + seg.length, out, filePos: seg.offset + pos - seg.start, toEnd: take === into });
        filled += take;
        pos += take;
      }
      // An open entry this read does not continue (the client resumed elsewhere) is done with.
      if (open !== null && reads[0]?.index !== open.index) release();
      // Every read settles before this returns, even after a failure: they all write into `target`.
      await eachLimited(reads, ENTRY_READS_AT_ONCE, async (r) => {
        if (closed) throw new Error('zip source closed');
        await readEntry(r);
      });
      if (closed) throw new Error('zip source closed');
      return filled;
    },
    close() {
      closed = true;
      release();
    },
  };
}
