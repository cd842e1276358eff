// Reference, not a peer: the least an upload server on this stack spends to put a body in an S3 bucket.
// uWebSockets.js, loaded as Sluice loads it, copies each chunk of the body into parts of Sluice's part size,
// uploads at most two at a time, each a PUT signed by the SDK's own signer (the payload hashed over http,
// UNSIGNED-PAYLOAD over https) on a kept-alive node:http agent, as Sluice sends its parts, then completes the
// upload and answers. No parsing, no checksum, no database: what Sluice spends
// more per GB than this row is its own work on the bytes and its bookkeeping. The object is deleted
// once answered. Env: PORT, STORAGE_URL (s3://bucket), AWS_ENDPOINT_URL_S3, AWS_REGION and the key pair.
import http from 'node:http';
import https from 'node:https';
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand,
} from '@aws-sdk/client-s3';
import { serveUws, uploadReply, type Response } from '../lib/uws-baseline.ts';
import { createS3Client } from '../../src/storage/s3/client.ts';
import { partSize } from '../../src/util/s3-sizes.ts';

const endpoint = new URL(process.env.AWS_ENDPOINT_URL_S3 ?? '');
const bucket = new URL(process.env.STORAGE_URL ?? '').host;
const secure = endpoint.protocol === 'https:';
const client = createS3Client({
  region: process.env.AWS_REGION ?? 'us-east-1',
  endpoint: endpoint.origin,
  credentials: { accessKeyId: process.env.AWS_ACCESS_KEY_ID ?? '', secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY ?? '' },
  bucket,
  prefix: '',
  // Sluice's part budget; nothing here reads it.
  partBufferBytes: 24 << 20,
});
const signer = client.config.signer();
const transport = secure ? https : http;
const agent = new transport.Agent({ keepAlive: true, maxSockets: 64 });
const PART = partSize(1);
const IN_FLIGHT = 2;
let seq = 0;

interface Part {
  readonly PartNumber: number;
  readonly ETag: string;
}

/** One PUT of part `n`, signed by the client's signer and sent as is; resolves with its ETag. */
async function putPart(key: string, uploadId: string, n: number, body: Buffer): Promise<string> {
  const path = `/${bucket}/${key}`;
  const headers: Record<string, string> = { host: endpoint.host, 'content-length': String(body.length) };
  if (secure) headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
  const request = { method: 'PUT', protocol: endpoint.protocol, hostname: endpoint.hostname, port: Number(endpoint.port), path, query: { partNumber: String(n), uploadId }, headers, body };
  const signed = (await (await signer).sign(request as never)) as unknown as { headers: Record<string, string> };
  return new Promise((resolve, reject) => {
    const target = `${path}?partNumber=${n}&uploadId=${encodeURIComponent(uploadId)}`;
    const req = transport.request({ agent, method: 'PUT', host: endpoint.hostname, port: endpoint.port, path: target, headers: signed.headers }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(String(res.headers.etag)) : reject(new Error(`UploadPart ${n}: HTTP ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** One body on its way into a multipart upload. */
interface Upload {
  readonly key: string;
  readonly uploadId: Promise<string>;
  /** Buffers whose parts are uploaded, to fill again. */
  readonly free: Buffer[];
  /** Full parts waiting for an upload slot. */
  readonly cut: Array<{ buf: Buffer; len: number; n: number }>;
  readonly done: Part[];
  fill: Buffer | null;
  used: number;
  parts: number;
  inFlight: number;
  size: number;
  paused: boolean;
  aborted: boolean;
  /** The last chunk is in (or the client is gone): settle() completes or aborts once nothing is in flight. */
  ended: boolean;
  /** settle() has taken over: it completes or aborts the upload once. */
  settling: boolean;
  failed: Error | null;
  readonly resume: () => void;
  readonly answer: (err: Error | null) => void;
}

/** Starts uploads of cut parts while a slot is free; a paused body resumes once none waits. */
function startParts(u: Upload): void {
  while (u.inFlight < IN_FLIGHT && u.cut.length > 0) {
    const { buf, len, n } = u.cut.shift()!;
    u.inFlight++;
    u.uploadId
      .then((id) => putPart(u.key, id, n, buf.subarray(0, len)))
      .then((ETag) => void u.done.push({ PartNumber: n, ETag }), (err: Error) => void (u.failed ??= err))
      .finally(() => {
        u.inFlight--;
        u.free.push(buf);
        startParts(u);
        if (u.paused && u.cut.length === 0) {
          u.paused = false;
          u.resume();
        }
        settle(u);
      });
  }
}

function cutPart(u: Upload): void {
  u.cut.push({ buf: u.fill!, len: u.used, n: ++u.parts });
  u.fill = null;
  u.used = 0;
  startParts(u);
}

/** Once the body has ended and every part is up: completes the upload, answers, then deletes the object. */
function settle(u: Upload): void {
  if (!u.ended || u.settling || u.inFlight > 0 || u.cut.length > 0) return;
  u.settling = true;
  void u.uploadId
    .then(async (id) => {
      if (u.failed || u.aborted) {
        await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: u.key, UploadId: id })).catch(() => {});
        u.answer(u.failed);
        return;
      }
      u.done.sort((a, b) => a.PartNumber - b.PartNumber);
      await client.send(new CompleteMultipartUploadCommand({ Bucket: bucket, Key: u.key, UploadId: id, MultipartUpload: { Parts: u.done } }));
      u.answer(null);
      await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: u.key }));
    })
    .catch((err: Error) => u.answer(err));
}

/** Takes the body into a multipart upload; `answer` gets its size once the object is complete, unless the client left. */
function receive(res: Response, answer: (err: Error | null, size: number) => void): void {
  const key = `bench-bare/${process.pid}-${++seq}`;
  const uploadId = client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key })).then((r) => r.UploadId ?? '');
  uploadId.catch(() => {});
  const u: Upload = {
    key, uploadId, free: [], cut: [], done: [], fill: null, used: 0, parts: 0, inFlight: 0, size: 0,
    paused: false, aborted: false, ended: false, settling: false, failed: null,
    resume: () => void (u.aborted || res.resume()),
    answer: (err) => void (u.aborted || answer(err, u.size)),
  };
  res.onAborted(() => {
    u.aborted = true;
    u.ended = true;
    // Parts still waiting are never sent: the upload is aborted once those in flight are back.
    u.cut.length = 0;
    settle(u);
  });
  res.onData((ab, isLast) => {
    const chunk = new Uint8Array(ab);
    u.size += chunk.length;
    for (let off = 0; off < chunk.length; ) {
      u.fill ??= u.free.pop() ?? Buffer.allocUnsafeSlow(PART);
      const n = Math.min(PART - u.used, chunk.length - off);
      u.fill.set(chunk.subarray(off, off + n), u.used);
      u.used += n;
      off += n;
      if (u.used === PART) cutPart(u);
    }
    // A full part waits for a slot: the body pauses. The last chunk never pauses.
    if (!isLast && u.cut.length > 0 && !u.paused) {
      u.paused = true;
      res.pause();
    }
    if (!isLast) return;
    if (u.used > 0) cutPart(u);
    u.ended = true;
    settle(u);
  });
}

serveUws('uws-s3', (res) => {
  receive(res, (err, size) => {
    res.cork(() => {
      if (err) res.writeStatus('500 Internal Server Error').end(JSON.stringify({ success: false, error: String(err) }));
      else res.writeStatus('201 Created').writeHeader('content-type', 'application/json').end(uploadReply(size));
    });
  });
});
