const MIB = 1024 * 1024;
/** S3's smallest part other than the last. */
export const MIN_PART = 5 * MIB;
export const MAX_PARTS = 10_000;

/**
 * Size of part `n` (1-based): 6 MiB for the first 5,000 parts, 16 MiB for the rest, so 10,000
 * parts hold 107 GiB (every plan cap, 100 GiB included) while each upload's buffers stay small.
 */
export function partSize(n: number): number {
  return n <= 5000 ? 6 * MIB : 16 * MIB;
}

/** The largest object the store can write: MAX_PARTS parts of partSize. No SDK here, so config can ask. */
export const MAX_OBJECT_BYTES = 5000 * partSize(1) + (MAX_PARTS - 5000) * partSize(MAX_PARTS);
