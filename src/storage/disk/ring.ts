// One part writer's ring of slots (part-writer.ts): which hold a buffer, which are free to fill.
import { firstSlots, fullSlots, giveBack, ringLimit, SLOT_BYTES, type WriterCount } from './slots.ts';

export interface Slot {
  /** Null while the hash worker holds the buffer. */
  view: Buffer | null;
  len: number;
  /** The part file is done with the buffer: its bytes are written. */
  written: boolean;
  /** File offset of the slot's bytes. */
  at: number;
}

/**
 * Buffers are taken as the file needs them (a small file uses one small one) and given up when the
 * writer finishes or aborts, so a request with many files holds at most one ring at a time.
 */
export interface Ring {
  readonly count: WriterCount;
  readonly slots: Slot[];
  readonly free: number[];
  /** Slot numbers whose buffer was given back because the ring shrank (see putBack). */
  readonly retired: number[];
  /** Slots holding a buffer: slots.length less the retired ones. */
  live: number;
  /** Whether the writer still counts in count.active. */
  counted: boolean;
}

/** A ring with no buffer yet; its writer counts as active until releaseRing. */
export function openRing(count: WriterCount): Ring {
  count.active++;
  return { count, slots: [], free: [], retired: [], live: 0, counted: true };
}

/** A slot to fill, or undefined while every buffer the ring may hold is out. */
export function takeSlot(r: Ring): number | undefined {
  const { slots, free } = r;
  if (free.length > 0) {
    const i = free.shift()!;
    const s = slots[i]!;
    // Reused means the file outgrew the small first slot: a full one takes its place.
    if (s.view!.length < SLOT_BYTES) {
      giveBack(s.view!);
      s.view = fullSlots.take();
    }
    return i;
  }
  if (r.live < ringLimit(r.count)) {
    r.live++;
    const i = r.retired.pop();
    if (i !== undefined) {
      slots[i]!.view = fullSlots.take();
      return i;
    }
    slots.push({ view: (slots.length === 0 ? firstSlots : fullSlots).take(), len: 0, written: false, at: 0 });
    return slots.length - 1;
  }
  return undefined;
}

/**
 * The file being filled outgrew its small first slot: its bytes move into a full one (page-aligned,
 * for O_DIRECT), so a small slot is only ever written as a whole file or an unaligned head.
 */
export function outgrow(r: Ring, slot: number, fill: number): void {
  const s = r.slots[slot]!;
  const small = s.view!;
  s.view = fullSlots.take();
  s.view.set(small.subarray(0, fill));
  giveBack(small);
}

/** No write or hash holds a buffer. */
export const ringIdle = (r: Ring): boolean => r.free.length === r.live;

/** A slot's buffer is back from the hash worker (or needed none); false if the ring was released meanwhile. */
export function putBack(r: Ring, slot: number, view: Buffer): boolean {
  const s = r.slots[slot];
  if (!s) return false; // released after an abort
  if (r.live > ringLimit(r.count)) {
    // More writers joined since this ring grew: give the buffer to them (a burst of uploads holds
    // BUSY_SLOTS each, which the spares kept cover, not the SLOTS its first writers grew to).
    giveBack(view);
    s.view = null;
    r.live--;
    r.retired.push(slot);
  } else {
    s.view = view;
    r.free.push(slot);
  }
  return true;
}

/** Drops the ring; `reuse` only when idle (no write or hash holds a buffer). */
export function releaseRing(r: Ring, reuse: boolean): void {
  if (r.counted) r.count.active--;
  r.counted = false;
  if (reuse) for (const s of r.slots) if (s.view) giveBack(s.view);
  r.slots.length = 0;
  r.free.length = 0;
  r.retired.length = 0;
  r.live = 0;
}
