import { crc32 } from '../../util/crc32.mjs';
import type { Digest, Hasher, HashStream } from '../hasher.ts';
import type { Slot } from './ring.ts';

/** How a part writer's written slots reach the hasher (part-writer.ts). */
export interface HashFeed {
  readonly hasher: Hasher;
  /** An append's bytes go to the hasher's state for `feedKey`, or nowhere when it is null. */
  readonly append: { readonly feedKey: string | null } | undefined;
  readonly slots: readonly Slot[];
  /** Submitted slots in file order, until handed to the hasher. */
  readonly order: number[];
  /** Takes a slot's buffer back once the hasher is done with it. */
  readonly back: (slot: number, view: Buffer) => void;
  /** Opened with the first slot handed over: a small file never needs one (see INLINE_HASH_BYTES). */
  stream: HashStream | null;
  /** Set by finish(): the whole file sits in its first slot, hashed here instead of by the worker. */
  inline: boolean;
  inlineDigest: Digest | null;
}

export function hashFeed(hasher: Hasher, append: HashFeed['append'], slots: readonly Slot[], back: HashFeed['back']): HashFeed {
  return { hasher, append, slots, order: [], back, stream: null, inline: false, inlineDigest: null };
}

export const hashStream = (f: HashFeed): HashStream => (f.stream ??= f.hasher.open((slot, buf) => f.back(slot, Buffer.from(buf))));

/** Hands written slots to the hasher strictly in file order. */
export function toHasher(f: HashFeed): void {
  const { slots, order, append } = f;
  while (order.length > 0 && slots[order[0]!]!.written) {
    const slot = order.shift()!;
    const s = slots[slot]!;
    const view = s.view!;
    if (append) {
      if (append.feedKey === null) f.back(slot, view);
      else {
        s.view = null;
        f.hasher.feedAhead(append.feedKey, s.at, view.buffer as ArrayBuffer, s.len, (buf) => f.back(slot, Buffer.from(buf)));
      }
      continue;
    }
    if (f.inline) {
      const bytesOfFile = view.subarray(0, s.len);
      f.inlineDigest = { crc32: crc32(bytesOfFile) >>> 0 };
      f.back(slot, view);
      continue;
    }
    s.view = null;
    hashStream(f).update(view.buffer as ArrayBuffer, s.len, slot);
  }
}
