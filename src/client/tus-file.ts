// One file (or its ciphertext) through tus with tus-js-client: resumed from `resumeUrl` when an
// earlier run created it, retried after a dropped connection from the server's offset, its upload
// URL handed out as soon as it exists so the caller can keep it for the next run.
import fs from 'node:fs';
import { Upload, type DetailedError } from 'tus-js-client';
import { ClientFailure, EXIT, failureOf, unreachable } from './failure.ts';

/** Each PATCH carries at most this much: proxies in front of a server often cap a request's body. */
const CHUNK_BYTES = 64 * 1024 * 1024;
/** After a broken connection, wait this long before each new try (then give up). */
const RETRY_DELAYS = [0, 1000, 3000, 5000, 10_000, 20_000, 30_000];

export interface TusJob {
  readonly endpoint: string;
  /** A path on disk, or bytes in memory (the manifest). */
  readonly source: string | Buffer;
  readonly metadata: Record<string, string>;
  readonly headers: Record<string, string>;
  readonly resumeUrl: string | null;
  readonly label: string;
  urlKnown(url: string): void;
  progress(sent: number, size: number): void;
}

/** What the server says of a finished upload (Sluice-* headers). */
export interface TusDone {
  readonly shareUrl: string;
  readonly fileId: number;
  readonly uploadToken: string | null;
}

export interface TusTransfer {
  readonly done: Promise<TusDone>;
  /** Stops sending and keeps the upload on the server, to be resumed. */
  stop(): Promise<void>;
}

function failed(err: DetailedError | Error, endpoint: string, label: string): ClientFailure {
  const res = (err as DetailedError).originalResponse;
  if (!res || !res.getStatus()) return unreachable((err as DetailedError).causingError ?? err, new URL(endpoint).origin, `sending ${label}`);
  return failureOf(res.getStatus(), res.getBody() ?? '', res.getHeader('Retry-After') ?? null, `sending ${label}`);
}

/**
 * Tries again after no answer, a server error or a locked upload, and after a PATCH's offset
 * conflict (tus: ask the offset anew); a refusal (a vanity name taken, a rate limit) stands.
 */
function retryable(err: DetailedError): boolean {
  const status = err.originalResponse?.getStatus() ?? 0;
  if (status === 0 || status >= 500 || status === 423) return true;
  return status === 409 && err.originalRequest?.getMethod() === 'PATCH';
}

export function sendThroughTus(job: TusJob): TusTransfer {
  let upload: Upload;
  const done = new Promise<TusDone>((resolve, reject) => {
    const input = typeof job.source === 'string' ? fs.createReadStream(job.source) : job.source;
    upload = new Upload(input, {
      endpoint: job.endpoint,
      uploadUrl: job.resumeUrl,
      chunkSize: CHUNK_BYTES,
      retryDelays: RETRY_DELAYS,
      metadata: job.metadata,
      headers: job.headers,
      // The caller keeps the URL in its own state file, beside the bundle it belongs to.
      storeFingerprintForResuming: false,
      onUploadUrlAvailable: () => {
        if (upload.url) job.urlKnown(upload.url);
      },
      onProgress: (sent, size) => job.progress(sent, size),
      onShouldRetry: retryable,
      onSuccess: ({ lastResponse: res }) => {
        const shareUrl = res.getHeader('Sluice-Vanity-Url') || res.getHeader('Sluice-Share-Url');
        const fileId = Number(res.getHeader('Sluice-File-Id'));
        if (!shareUrl || !Number.isSafeInteger(fileId)) {
          return reject(new ClientFailure(EXIT.REFUSED, `sending ${job.label}: the server did not name the bundle (is it a Sluice server?)`));
        }
        resolve({ shareUrl, fileId, uploadToken: res.getHeader('Sluice-Upload-Token') || null });
      },
      onError: (err) => reject(failed(err, job.endpoint, job.label)),
    });
    upload.start();
  });
  return { done, stop: () => upload.abort(false) };
}
