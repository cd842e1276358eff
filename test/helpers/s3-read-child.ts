/**
 * Opens the store named by STORAGE_URL and the AWS_* variables (start-up checks included), reads
 * the object whose key is its argument in order through 1 MiB reads a moment apart, and prints `ready <sha256>`:
 * for reads that need the process's own environment (NODE_EXTRA_CA_CERTS for a test's TLS endpoint).
 */
import { createHash } from 'node:crypto';
import { loadConfig } from '../../src/config.ts';
import { createS3Store } from '../../src/storage/s3/store.ts';

const store = await createS3Store({ location: loadConfig(process.env).s3!, tmpDir: '/tmp' });
const reader = await store.open(process.argv[2]!);
const hash = createHash('sha256');
const buf = Buffer.alloc(1 << 20);
for (let at = 0; at < reader.size; at += buf.length) {
  const part = buf.subarray(0, Math.min(buf.length, reader.size - at));
  await reader.readInto(part, at);
  hash.update(part);
  // A reader that takes its time, as a download does while its client drains: the connection keeps delivering meanwhile.
  await new Promise((r) => setTimeout(r, 2));
}
reader.close();
await store.close();
process.stdout.write(`ready ${hash.digest('hex')}\n`);
