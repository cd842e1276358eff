import type { BlobDigest, BlobWriter } from '../storage/blob-store.ts';

// What multipart ingestion (multipart.ts) hands the upload routes.

export interface IngestedFile extends BlobDigest {
  /** Finished (durable), not yet published: the caller publishes it, or aborts it. */
  readonly writer: BlobWriter;
  readonly name: string;
  readonly mimeType: string;
}

export interface IngestResult {
  readonly fields: Readonly<Record<string, string>>;
  readonly files: readonly IngestedFile[];
}

export interface Ingest {
  /**
   * Starts consuming the body. `reserve(n)` is asked before n more file bytes are accepted; false
   * means the cap is crossed and the request is answered 400 at once. `room`, the most file bytes
   * the body may carry, bounds the whole body as it arrives (with the most a form adds), so a body
   * that cannot fit is refused before its queued bytes are parsed.
   */
  start(reserve: (n: number) => boolean, room?: number): Promise<IngestResult>;
  /** Abandons the body (e.g. auth failed): parts removed; the caller sends the error reply. */
  cancel(): void;
}
