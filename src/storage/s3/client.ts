import { randomBytes } from 'node:crypto';
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand,
  GetObjectCommand, HeadBucketCommand, PutObjectCommand, S3Client,
} from '@aws-sdk/client-s3';
import { Agent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { Readable } from 'node:stream';
import type { S3Location } from '../../config.ts';
import { BlobError } from '../../errors.ts';
import { getBody, signGet } from './get.ts';
import { isNetworkError, TLS_SLICE_BYTES } from './wire.ts';
import { uploadOnePart } from './put-part.ts';

/** A bucket that cannot serve as a store; the message is one line naming the setting to fix. */
export class StorageSetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StorageSetupError';
  }
}

/**
 * What one store call may take, retries included, before it fails as UNAVAILABLE (503 with
 * Retry-After): a stalled store must not hold a request, or its client, without an answer. A GET over
 * a socket of its own fails when that socket stays silent this long.
 */
export const REQUEST_TIMEOUT_MS = 30_000;
/** Calls whose work in the store grows with the object (a server-side copy of up to 5 GiB, completing thousands of parts). */
const LONG_CALLS = new Set(['UploadPartCopyCommand', 'CompleteMultipartUploadCommand']);
const LONG_CALL_MS = 300_000;

/**
 * One client per store. Checksums only when an operation requires one: radosgw answers a streamed
 * PutObject under the SDK's default (a trailing checksum) with 411. Sockets are kept alive and
 * their number bounded, since every part and every ranged read is its own request, and a download
 * holds one for as long as its client reads.
 */
export function createS3Client(loc: S3Location, deadlineMs = REQUEST_TIMEOUT_MS): S3Client {
  // The SDK warns at every client it builds on Node < 22 that its releases after January 2027 will
  // need Node 22. package.json pins an exact SDK version, which supports the Node versions Sluice
  // does: the warning is about an upgrade nobody made, printed at every start of every node.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  const agentOpts = { keepAlive: true, maxSockets: 256 };
  const client = new S3Client({
    region: loc.region,
    endpoint: loc.endpoint,
    forcePathStyle: loc.endpoint !== undefined,
    // A copy: the SDK marks the object it is given.
    credentials: loc.credentials ? { ...loc.credentials } : undefined,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 3,
    requestHandler: {
      httpAgent: new Agent(agentOpts),
      httpsAgent: new HttpsAgent(agentOpts),
      connectionTimeout: 5000,
      // Until the answer's headers, each attempt; without the flag the SDK only logs a warning.
      requestTimeout: deadlineMs,
      throwOnRequestTimeout: true,
    },
  });
  withDeadline(client, deadlineMs);
  if (!loc.endpoint || loc.endpoint.startsWith('https:')) {
    unsignedPayloads(client);
    slicedBodies(client);
  }
  // Outermost, so it sees what is left once the SDK's own retries are spent.
  client.middlewareStack.add(
    (next) => async (args) => {
      try {
        return await next(args);
      } catch (err) {
        throw asUnavailable(err);
      }
    },
    { step: 'initialize', name: 'sluiceUnavailable' },
  );
  return client;
}

/**
 * Over https, bodies are sent as UNSIGNED-PAYLOAD: the SDK would otherwise SHA-256 every part for its
 * signature, the largest single CPU cost of an upload, while TLS already authenticates every byte in
 * transit. The signer uses a content hash header that is already set. Plain http keeps the signed
 * hash: there it is the only check of the bytes on the way.
 */
function unsignedPayloads(client: S3Client): void {
  client.middlewareStack.add(
    (next) => (args) => {
      const req = args.request as { headers?: Record<string, string>; body?: unknown };
      if (req.headers && req.body !== undefined) req.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
      return next(args);
    },
    { step: 'build', name: 'sluiceUnsignedPayload' },
  );
}

/**
 * Over https, a large body the SDK sends (a PutObject) goes to the socket in slices (TLS_SLICE_BYTES,
 * wire.ts says why). This step runs at each attempt, after the signature, so a retry sends the whole
 * body again.
 */
function slicedBodies(client: S3Client): void {
  client.middlewareStack.add(
    (next) => (args) => {
      const req = args.request as { body?: unknown };
      const body = req.body;
      if (!Buffer.isBuffer(body) || body.length <= TLS_SLICE_BYTES) return next(args);
      const slices = function* (): Generator<Buffer> {
        for (let at = 0; at < body.length; at += TLS_SLICE_BYTES) yield body.subarray(at, at + TLS_SLICE_BYTES);
      };
      const request: unknown = Object.assign(Object.create(Object.getPrototypeOf(req) as object) as object, req, {
        body: Readable.from(slices(), { objectMode: false }),
      });
      return next({ ...args, request });
    },
    { step: 'deserialize', name: 'sluiceSlicedBody' },
  );
}

/**
 * Every call through `client` ends within its deadline, its retries included: an AbortSignal that
 * fires then (besides the caller's own) cuts it, and the store is reported UNAVAILABLE. The SDK's
 * per-attempt timeout alone would let three attempts and their back-off run on.
 */
function withDeadline(client: S3Client, deadlineMs: number): void {
  const send = client.send.bind(client) as (command: unknown, options?: { abortSignal?: AbortSignal }) => Promise<unknown>;
  (client as { send: unknown }).send = async (command: { constructor: { name: string } }, options: { abortSignal?: AbortSignal } = {}) => {
    const ms = LONG_CALLS.has(command.constructor.name) ? LONG_CALL_MS : deadlineMs;
    const deadline = AbortSignal.timeout(ms);
    const abortSignal = options.abortSignal ? AbortSignal.any([options.abortSignal, deadline]) : deadline;
    try {
      return await send(command, { ...options, abortSignal });
    } catch (err) {
      if (deadline.aborted && !options.abortSignal?.aborted) {
        throw new BlobError('UNAVAILABLE', `object store did not answer ${command.constructor.name} within ${ms / 1000} s`, { cause: err });
      }
      throw err;
    }
  };
}

/**
 * An outage of the store (refused or reset connections, timeouts, 5xx answers) becomes the
 * contract's UNAVAILABLE, which the HTTP layer answers with 503: the request may succeed later, and
 * nothing about it was the client's fault. Answers the store gave on purpose (4xx) pass through.
 */
export function asUnavailable(err: unknown): unknown {
  const { status } = s3Status(err);
  const e = err as { name?: string; code?: string } | null;
  const outage = status >= 500 || (status === 0 && (e?.name === 'TimeoutError' || isNetworkError(err)));
  if (!outage) return err;
  const why = err instanceof Error ? err.message || err.name : String(err);
  return new BlobError('UNAVAILABLE', `object store unavailable: ${why}`, { cause: err });
}

/** The HTTP status and S3 error code of an SDK failure (0 and '' for a network error). */
export function s3Status(err: unknown): { status: number; code: string } {
  const e = err as { $metadata?: { httpStatusCode?: number }; name?: string; Code?: string };
  return { status: e?.$metadata?.httpStatusCode ?? 0, code: e?.Code ?? e?.name ?? '' };
}

export function isNotFound(err: unknown): boolean {
  const { status, code } = s3Status(err);
  return status === 404 || code === 'NoSuchKey' || code === 'NotFound' || code === 'NoSuchUpload';
}

/** NoSuchKey becomes the contract's NOT_FOUND; anything else passes through. */
export function mapNotFound(err: unknown, what: string): unknown {
  return isNotFound(err) ? new BlobError('NOT_FOUND', `${what} does not exist`) : err;
}

const CREDENTIALS = 'AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY';

/**
 * Start-up checks: the bucket exists and these credentials may use it, and the server honours Range
 * reads and multipart uploads, which downloads and uploads rely on. A server that ignored Range
 * would send whole objects where a part was asked for, so this refuses to start instead.
 */
export async function checkBucket(client: S3Client, loc: S3Location): Promise<void> {
  const where = `s3://${loc.bucket}${loc.endpoint ? ` at ${loc.endpoint}` : ''}`;
  try {
    await client.send(new HeadBucketCommand({ Bucket: loc.bucket }));
  } catch (err) {
    const { status, code } = s3Status(err);
    if (status === 404 || code === 'NoSuchBucket' || code === 'NotFound') {
      throw new StorageSetupError(`STORAGE_URL: bucket ${where} does not exist; create it first`);
    }
    if (status === 403 || status === 400 || code === 'CredentialsProviderError') {
      throw new StorageSetupError(`${CREDENTIALS}: refused by ${where} (${code || status}); check the key pair and its access to the bucket`);
    }
    if (status === 301) throw new StorageSetupError(`AWS_REGION: bucket ${where} is in another region (${code})`);
    const why = err instanceof Error ? err.message : String(err);
    throw new StorageSetupError(`${loc.endpoint ? 'AWS_ENDPOINT_URL_S3' : 'AWS_REGION'}: cannot reach ${where}: ${why}`);
  }
  const key = `${loc.prefix}probe/${randomBytes(16).toString('hex')}`;
  const bytes = randomBytes(64);
  try {
    await client.send(new PutObjectCommand({ Bucket: loc.bucket, Key: key, Body: bytes }));
    const got = await client.send(new GetObjectCommand({ Bucket: loc.bucket, Key: key, Range: 'bytes=10-19' }));
    const body = Buffer.from(await got.Body!.transformToByteArray());
    if (got.$metadata.httpStatusCode !== 206 || !body.equals(bytes.subarray(10, 20))) {
      throw new StorageSetupError(`STORAGE_URL: ${where} does not honour Range reads (asked for 10 bytes, got ${body.length}); downloads need them`);
    }
    await probeSocketGet(client, loc.bucket, key, bytes.subarray(10, 20), where);
    await probeMultipart(client, loc.bucket, key, bytes, where);
  } catch (err) {
    if (err instanceof StorageSetupError) throw err;
    const { status, code } = s3Status(err);
    if (status === 403) throw new StorageSetupError(`${CREDENTIALS}: may not write to ${where} (${code || status})`);
    throw err;
  } finally {
    await client.send(new DeleteObjectCommand({ Bucket: loc.bucket, Key: key })).catch(() => {});
  }
}

/** Large reads go over a socket of their own (getBody), not the SDK's: the same probe read that way. */
async function probeSocketGet(client: S3Client, bucket: string, key: string, want: Buffer, where: string): Promise<void> {
  let why: string;
  try {
    const body = await getBody(await signGet(client, bucket, key), 10, 20, 'the probe object', 10_000);
    const got = Buffer.alloc(want.length);
    const n = await body.fill(got).finally(() => body.destroy());
    if (n === want.length && got.equals(want)) return;
    why = `asked for 10 bytes, got ${n} that differ`;
  } catch (err) {
    why = err instanceof Error ? err.message : String(err);
  }
  throw new StorageSetupError(`STORAGE_URL: ${where} answered the SDK but not the same GET sent over a plain connection (${why}); downloads read that way`);
}

async function probeMultipart(client: S3Client, bucket: string, key: string, bytes: Buffer, where: string): Promise<void> {
  let uploadId: string | undefined;
  try {
    uploadId = (await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }))).UploadId;
    // Parts are sent as put-part.ts sends them, not through the SDK: the probe's part too.
    const ETag = await uploadOnePart(client, bucket, key, uploadId!, 1, bytes, 10_000);
    await client.send(new CompleteMultipartUploadCommand({
      Bucket: bucket, Key: key, UploadId: uploadId, MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] },
    }));
    uploadId = undefined;
    const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    const body = Buffer.from(await got.Body!.transformToByteArray());
    if (!body.equals(bytes)) throw new Error('the completed object differs from its part');
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new StorageSetupError(`STORAGE_URL: ${where} refuses multipart uploads (${why}); uploads need them`);
  } finally {
    if (uploadId) await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId })).catch(() => {});
  }
}
