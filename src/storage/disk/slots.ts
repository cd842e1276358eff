// The write ring's sizes and buffer pools: one set for every write path (new objects and appends).
import { pageAligned, spareBuffers } from '../../util/spare-buffers.ts';

/** Disk writes are coalesced into slots of this size (busboy hands out ~30 KB pieces). */
export const SLOT_BYTES = 1 << 20;
/**
 * Files up to this size are checksummed on the event loop when they finish (microseconds for a
 * CRC-32) instead of two round trips to the hash worker, which cost more than the checksum.
 */
export const INLINE_HASH_BYTES = 256 * 1024;
/**
 * Slots per file: bounds memory per upload to SLOTS × SLOT_BYTES whatever the file size. Four keep
 * a write in flight while the next slot fills and one is being hashed; more cost memory without
 * moving bytes faster (bench/RESULTS.md).
 */
const SLOTS = 4;
/**
 * With more than BUSY_WRITERS files streaming at once, a ring grows to only BUSY_SLOTS: they share
 * the disk and the hash worker, so each needs less in flight: 8 uploads hold 16 MiB of rings instead
 * of 32, at the same speed. Two is the floor: one fills while the other is out, and its return always
 * reopens room (see roomy in part-writer.ts), so a writer can never wait on itself. A ring that grew larger before
 * the others joined shrinks back as its slots return (putBack in ring.ts), or each burst of uploads after the
 * first would allocate fresh slots beyond the spares kept (bench/RESULTS.md).
 */
const BUSY_WRITERS = 2;
const BUSY_SLOTS = 2;
/** Writers streaming in one store (the store's instance holds it, not the process). */
export interface WriterCount {
  active: number;
}
export const ringLimit = (count: WriterCount): number => (count.active > BUSY_WRITERS ? BUSY_SLOTS : SLOTS);
/**
 * Room a writer keeps before write() says stop: two of uWS's largest chunks (512 KiB), so the rest of
 * a socket chunk and one more after a pause land without being held.
 */
export const ROOM_BYTES = 1 << 20;
/**
 * Every file starts in a slot this small, swapped for a full one once the file outgrows it: most
 * uploads by count are small, and a fresh 1 MiB buffer per 1 KiB file kept the GC busy.
 */
const FIRST_SLOT_BYTES = 64 * 1024;
/**
 * Buffers of finished writers, reused by the next files. Up to 16 full slots are kept: what 8
 * uploads at once hold (BUSY_SLOTS each). Keeping fewer makes every burst of large uploads allocate
 * fresh slots and drop them again, and freed slots stay resident until the GC and malloc give their
 * pages back, which raises the peak RSS of a burst (bench/RESULTS.md). Spares exist only once used,
 * so the idle RSS does not grow. Full slots are page-aligned, so one is written with O_DIRECT from
 * where its bytes are and still moves to the hash worker by transfer; a first slot is written only as
 * a whole file (through the page cache) or moves into a full slot (outgrow in ring.ts), and stays
 * ordinary memory, as a page-aligned buffer per small upload costs a mapping of its own.
 */
export const firstSlots = spareBuffers('first-slot', FIRST_SLOT_BYTES, 64);
export const fullSlots = spareBuffers('slot', SLOT_BYTES, 16, pageAligned);
export const giveBack = (buf: Buffer): void => void (buf.length === SLOT_BYTES ? fullSlots : firstSlots).give(buf);

