/**
 * The S3 store's writer process for the storage contract's crash tests (the modes of
 * helpers/storage-child.ts): it opens the store named by STORAGE_URL and the AWS_* variables,
 * brings one object to the state named, prints `ready <key or id>` and waits to be killed.
 */
import { loadConfig } from '../../src/config.ts';
import { createS3Store } from '../../src/storage/s3.ts';

const [mode, id, offset] = process.argv.slice(2);
const store = await createS3Store({ location: loadConfig(process.env).s3!, tmpDir: '/tmp', check: false });
const MiB = 1 << 20;
// More than a part, so some bytes have reached the bucket when the kill comes.
const bytes = Buffer.alloc(11 * MiB, 0x5a);

if (mode === 'midwrite') {
  const w = store.createWriter();
  w.write(bytes);
  await new Promise((r) => setTimeout(r, 500));
  process.stdout.write(`ready ${w.key}\n`);
} else if (mode === 'published') {
  const w = store.createWriter();
  w.write(bytes);
  await w.finish();
  await w.publish();
  process.stdout.write(`ready ${w.key}\n`);
} else if (mode === 'midappend') {
  const a = await store.append(id!, Number(offset), { limit: Number.MAX_SAFE_INTEGER, hashAhead: true });
  a.write(bytes);
  await new Promise((r) => setTimeout(r, 500));
  process.stdout.write(`ready ${id}\n`);
} else throw new Error(`unknown mode ${mode}`);
setInterval(() => {}, 1 << 30);
