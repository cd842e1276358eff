/**
 * Stores an object of 3 MiB through Sluice's S3 client (STORAGE_URL and the AWS_* variables; for an
 * https endpoint, NODE_EXTRA_CA_CERTS) while its first attempt reads the whole body and then fails as a
 * reset connection does, reads it back, and prints `ready <attempts>,<sent bytes per attempt>,<same bytes>`.
 */
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { loadConfig } from '../../src/config.ts';
import { createS3Client } from '../../src/storage/s3/client.ts';

const loc = loadConfig(process.env).s3!;
const client = createS3Client(loc);
const sent: number[] = [];
client.middlewareStack.add(
  (next) => async (args) => {
    const body = (args.request as { body?: unknown }).body;
    if (body === undefined) return next(args);
    if (sent.length > 0 || !(body instanceof Readable)) {
      sent.push(-1);
      return next(args);
    }
    let n = 0;
    for await (const c of body) n += (c as Buffer).length;
    sent.push(n);
    throw Object.assign(new Error('connection reset (test)'), { code: 'ECONNRESET' });
  },
  { step: 'deserialize', name: 'testResetOnce', priority: 'low' },
);
const data = randomBytes(3 << 20);
const key = `retry-${process.pid}`;
await client.send(new PutObjectCommand({ Bucket: loc.bucket, Key: key, Body: data }));
const got = Buffer.from(await (await client.send(new GetObjectCommand({ Bucket: loc.bucket, Key: key }))).Body!.transformToByteArray());
client.destroy();
process.stdout.write(`ready ${sent.length},${sent.join('/')},${got.equals(data)}\n`);
