import http from 'node:http';
import https from 'node:https';
import { UploadPartCommand, type S3Client } from '@aws-sdk/client-s3';
import { BlobError } from '../../errors.ts';
import { captureSigned, failedAnswer, isNetworkError, requestTarget, retrying, TLS_SLICE_BYTES, unavailable } from './wire.ts';

/**
 * Where the parts of one multipart upload go: the SDK's own UploadPart request for it, built and
 * signed once (wire.ts), of which each part changes only its number and its body.
 */
export interface PartAddress {
  readonly tls: boolean;
  readonly host: string;
  readonly port: number;
  readonly path: string;
  /** The SDK's query for part 1; partNumber is replaced for each part. */
  readonly query: Readonly<Record<string, string | string[] | null>>;
  /** The Host header the SDK signed (with a port when it is not the scheme's). */
  readonly hostHeader: string;
  /** The signing scope the SDK chose, read off its Authorization header. */
  readonly region: string;
  readonly service: string;
}

const EMPTY = Buffer.alloc(0);

export async function partAddress(client: S3Client, bucket: string, key: string, uploadId: string): Promise<PartAddress> {
  const req = await captureSigned(client, new UploadPartCommand({ Bucket: bucket, Key: key, UploadId: uploadId, PartNumber: 1, Body: EMPTY, ContentLength: 0 }));
  const scope = /Credential=[^/,]+\/\d{8}\/([^/,]+)\/([^/,]+)\/aws4_request/.exec(req.headers.authorization ?? '');
  if (!scope) throw new Error('the S3 client did not sign UploadPart with SigV4');
  return { tls: req.tls, host: req.host, port: req.port, path: req.path, query: req.query, hostHeader: req.headers.host ?? req.host, region: scope[1]!, service: scope[2]! };
}

/** Agents of our own: kept-alive connections for parts only, bounded as the SDK's are (client.ts). */
const agents = { http: new http.Agent({ keepAlive: true, maxSockets: 256 }), https: new https.Agent({ keepAlive: true, maxSockets: 256 }) };
const CONNECT_TIMEOUT_MS = 5000;
const MAX_ERROR_BODY = 64 * 1024;

/**
 * Uploads part `n` of the upload at `to` and resolves with its ETag. The request is signed by the
 * client's own SigV4 signer and sent on node:http, not through the SDK's middleware, whose fixed work
 * per request cost several times what this does (bench/RESULTS.md). As the SDK's calls do in
 * client.ts: an outage (refused or reset connections, 5xx) is tried three
 * times, then UNAVAILABLE, as is a call past `deadlineMs`; an answer the store gave on purpose (4xx)
 * is thrown in the SDK's error shape.
 */
export async function putPart(client: S3Client, to: PartAddress, n: number, body: Buffer, deadlineMs: number, signal?: AbortSignal): Promise<string> {
  const what = `UploadPart ${n}`;
  const deadline = AbortSignal.timeout(deadlineMs);
  const stop = signal ? AbortSignal.any([signal, deadline]) : deadline;
  try {
    return await retrying(() => attempt(client, to, n, body, what, stop), stop);
  } catch (err) {
    if (deadline.aborted && !signal?.aborted) throw new BlobError('UNAVAILABLE', `object store did not answer ${what} within ${deadlineMs / 1000} s`, { cause: err });
    throw err;
  }
}

/** Each client's SigV4 signer, made once: the one the SDK makes for its own requests (client.config.signer). */
const signers = new WeakMap<S3Client, ReturnType<S3Client['config']['signer']>>();

/**
 * The unsigned request for part `n`: the payload is signed over plain http (the signer hashes it when
 * no hash is set), and UNSIGNED-PAYLOAD over TLS, as client.ts has the SDK send other bodies.
 */
export function partRequest(to: PartAddress, n: number, body: Buffer) {
  const headers: Record<string, string> = { host: to.hostHeader, 'content-length': String(body.length) };
  if (to.tls) headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
  const query = { ...to.query, partNumber: String(n) };
  return { method: 'PUT', protocol: to.tls ? 'https:' : 'http:', hostname: to.host, port: to.port, path: to.path, query, headers, body };
}

async function attempt(client: S3Client, to: PartAddress, n: number, body: Buffer, what: string, stop: AbortSignal): Promise<string> {
  stop.throwIfAborted();
  let signer = signers.get(client);
  if (!signer) signers.set(client, (signer = client.config.signer()));
  const request = partRequest(to, n, body);
  const signed = (await (await signer).sign(
    request as never,
    // The SDK's clock offset, learnt from the store's answers when the local clock is off.
    { signingRegion: to.region, signingService: to.service, signingDate: new Date(Date.now() + (client.config.systemClockOffset ?? 0)) },
  )) as unknown as { headers: Record<string, string>; path: string; query: Record<string, string | string[] | null> };
  return new Promise<string>((resolve, reject) => {
    const transport = to.tls ? https : http;
    const req = transport.request({
      agent: to.tls ? agents.https : agents.http,
      method: 'PUT',
      host: to.host,
      port: to.port,
      path: requestTarget(signed.path, signed.query),
      headers: signed.headers,
      signal: stop,
    });
    // A new connection gets CONNECT_TIMEOUT_MS, as the SDK's do; the rest of the wait is the deadline's.
    req.on('socket', (s) => {
      if (!s.connecting) return;
      const timer = setTimeout(() => req.destroy(unavailable(what, new Error(`no connection within ${CONNECT_TIMEOUT_MS / 1000} s`))), CONNECT_TIMEOUT_MS);
      s.once('connect', () => clearTimeout(timer));
      s.once('close', () => clearTimeout(timer));
    });
    req.on('error', (err) => reject(isNetworkError(err) ? unavailable(what, err) : err));
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      const text: Buffer[] = [];
      let kept = 0;
      res.on('data', (b: Buffer) => {
        if (status !== 200 && kept < MAX_ERROR_BODY) text.push(b);
        kept += b.length;
      });
      res.on('error', (err) => reject(isNetworkError(err) ? unavailable(what, err) : err));
      res.on('end', () => {
        const etag = res.headers.etag;
        if (status === 200 && etag) resolve(etag);
        else if (status === 200) reject(new Error(`${what}: the object store answered without an ETag`));
        else reject(failedAnswer(what, status, Buffer.concat(text).toString('latin1')));
      });
    });
    if (!to.tls || body.length <= TLS_SLICE_BYTES) return void req.end(body);
    let at = 0;
    const next = (): void => {
      while (at < body.length) {
        const slice = body.subarray(at, (at += TLS_SLICE_BYTES));
        if (at >= body.length) return void req.end(slice);
        if (!req.write(slice)) return void req.once('drain', next);
      }
    };
    next();
  });
}

/** One part on its own (a tail, a probe), its address learnt for it. */
export async function uploadOnePart(client: S3Client, bucket: string, key: string, uploadId: string, n: number, body: Buffer, deadlineMs: number): Promise<string> {
  return putPart(client, await partAddress(client, bucket, key, uploadId), n, body, deadlineMs);
}
