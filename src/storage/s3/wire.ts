import type { S3Client } from '@aws-sdk/client-s3';
import { BlobError } from '../../errors.ts';

/**
 * What this store sends without the SDK's request pipeline (ranged GETs in get.ts, parts in
 * put-part.ts) starts from a request the SDK itself built and signed, so its addressing (endpoint,
 * path or virtual-host style, query) and its signing scope are the SDK's. This holds what both share.
 */
export interface CapturedRequest {
  readonly tls: boolean;
  /** Without IPv6 brackets: what a socket connects to. */
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly query: Readonly<Record<string, string | string[] | null>>;
  readonly headers: Readonly<Record<string, string>>;
}

interface SdkRequest {
  protocol: string;
  hostname: string;
  port?: number;
  path: string;
  query?: Record<string, string | string[] | null>;
  headers: Record<string, string>;
}

interface Command {
  middlewareStack: { addRelativeTo(mw: unknown, opts: { relation: 'after'; toMiddleware: string; name: string }): void };
}

/**
 * The request `client` would send for `command`, signed but not sent: a step placed right after the
 * SDK's signing takes the request and answers in place of the network.
 */
export async function captureSigned(client: S3Client, command: Command): Promise<CapturedRequest> {
  let req: SdkRequest | undefined;
  command.middlewareStack.addRelativeTo(
    () => async (args: { request: unknown }) => {
      req = args.request as SdkRequest;
      return { output: { $metadata: {} }, response: { statusCode: 200, headers: {} } };
    },
    { relation: 'after', toMiddleware: 'httpSigningMiddleware', name: 'sluiceSignOnly' },
  );
  await client.send(command as never);
  if (!req) throw new Error('the S3 client did not sign the request');
  const secure = req.protocol === 'https:';
  return {
    tls: secure,
    host: req.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: req.port ?? (secure ? 443 : 80),
    path: req.path,
    query: { ...req.query },
    headers: { ...req.headers },
  };
}

/** Path and query of a request line, encoded as SigV4 signs them. */
export function requestTarget(path: string, query: Readonly<Record<string, string | string[] | null>>): string {
  const parts = Object.entries(query).flatMap(([k, v]) =>
    (Array.isArray(v) ? v : [v]).map((one) => (one === null ? encodeURIComponent(k) : `${encodeURIComponent(k)}=${encodeURIComponent(one)}`)),
  );
  return parts.length ? `${path}?${parts.join('&')}` : path;
}

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/** A refused, reset or unreachable connection: the store's outage, not a fault of the request (a bad certificate is not one). */
export const isNetworkError = (err: unknown): boolean => NETWORK_CODES.has((err as { code?: string } | null)?.code ?? '');

export const unavailable = (what: string, cause: Error): BlobError =>
  new BlobError('UNAVAILABLE', `object store unavailable: ${what}: ${cause.message}`, { cause });

/**
 * The error for an answer that is not a success: a 5xx is the store's outage (UNAVAILABLE, tried
 * again); anything else it gave on purpose, in the SDK's error shape (status in `$metadata`, the S3
 * error code as `Code`), so that client.ts's s3Status and isNotFound read it as they read the SDK's.
 */
export function failedAnswer(what: string, status: number, body: string): Error {
  if (status >= 500) return unavailable(what, new Error(`HTTP ${status}`));
  const code = /<Code>([^<]{1,100})<\/Code>/.exec(body)?.[1];
  return Object.assign(new Error(`${what}: the object store answered HTTP ${status}${code ? ` ${code}` : ''}`), {
    $metadata: { httpStatusCode: status },
    Code: code,
  });
}

/**
 * Over TLS a body is written in slices of this size, each once the last is out: Node encrypts all of
 * one write at once and holds the ciphertext until the socket takes it, a second copy of what is written.
 */
export const TLS_SLICE_BYTES = 1024 * 1024;

/** The SDK's own policy: three attempts for an outage, with a growing pause between them. */
const ATTEMPTS = 3;

/** `attempt()` again while it fails as UNAVAILABLE, up to ATTEMPTS in all, unless `signal` fired. */
export async function retrying<T>(attempt: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      const again = err instanceof BlobError && err.code === 'UNAVAILABLE' && n < ATTEMPTS && !signal?.aborted;
      if (!again) throw err;
      await new Promise((r) => setTimeout(r, 100 * 2 ** n * Math.random()));
    }
  }
}
