/**
 * How the upload page splits work between one multipart request and tus. Files above the threshold
 * go through /api/v1/tus/ in pieces of `chunkBytes`: they survive a dropped connection (the page
 * retries and resumes from the server's offset) and stay under the 1e9-byte Content-Length the
 * 20.30 binding drops. Smaller files share multipart requests: one rate-limited request for many
 * files instead of one creation each, and fewer round trips and disk flushes.
 */
export interface UploadOptions {
  readonly tusThresholdBytes: number;
  readonly tusChunkBytes: number;
}

export const MiB = 1 << 20;
export const DEFAULT_UPLOAD_OPTIONS: UploadOptions = { tusThresholdBytes: 64 * MiB, tusChunkBytes: 64 * MiB };
/** Smallest chunk a query may ask for: below it the per-PATCH round trip and disk flush dominate. */
const MIN_CHUNK_BYTES = 256 * 1024;

/**
 * The page's query may lower both figures (tests push small files through tus in several pieces);
 * it can never raise them, so production behaviour and request sizes stay bounded by the defaults.
 */
export function uploadOptionsFrom(query: URLSearchParams): UploadOptions {
  const lower = (name: string, fallback: number, min: number): number => {
    const raw = query.get(name);
    if (raw === null || !/^\d{1,12}$/.test(raw)) return fallback;
    const n = Number(raw);
    return n >= min && n < fallback ? n : fallback;
  };
  return {
    tusThresholdBytes: lower('tus_threshold', DEFAULT_UPLOAD_OPTIONS.tusThresholdBytes, 0),
    tusChunkBytes: lower('tus_chunk', DEFAULT_UPLOAD_OPTIONS.tusChunkBytes, MIN_CHUNK_BYTES),
  };
}
