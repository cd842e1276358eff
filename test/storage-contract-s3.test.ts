/**
 * The blob-store contract (helpers/storage-contract.ts) on the S3 store, against a real Ceph radosgw
 * (helpers/ceph.ts, one cluster for the file). Each store gets its own prefix in one bucket; its
 * residue is every object and incomplete multipart upload under that prefix.
 */
import { after, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { ListMultipartUploadsCommand, type S3Client } from '@aws-sdk/client-s3';
import { loadConfig } from '../src/config.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { deleteObjects } from '../src/storage/s3/append.ts';
import { cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';
import { spawnReadyChild, storageContract, type StoreUnderTest } from './helpers/storage-contract.ts';

const skip = cephSkip('blob store contract on S3 (test/storage-contract-s3.test.ts)');
let cluster: Promise<{ ceph: Ceph; s3: S3Client }> | null = null;
const ready = () => (cluster ??= startCeph().then((ceph) => ({ ceph, s3: ceph.client() })));
after(async () => {
  if (!cluster) return;
  const { ceph, s3 } = await cluster;
  s3.destroy();
  await ceph.stop();
});

async function residue(s3: S3Client, bucket: string, prefix: string): Promise<string[]> {
  const { ListObjectsV2Command } = await import('@aws-sdk/client-s3');
  const objects = (await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }))).Contents ?? [];
  const uploads = (await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix }))).Uploads ?? [];
  return [...objects.map((o) => o.Key!.slice(prefix.length)), ...uploads.map((u) => `upload ${u.Key!.slice(prefix.length)}`)].sort();
}

/** Each store's variables, for the crash child (the contract hands it the store alone). */
const envOf = new WeakMap<object, Record<string, string>>();

async function s3UnderTest(): Promise<StoreUnderTest> {
  const { ceph, s3 } = await ready();
  const name = `c${randomBytes(6).toString('hex')}`;
  const env = ceph.env(name);
  const store = await createS3Store({ location: loadConfig(env).s3!, tmpDir: os.tmpdir() });
  const prefix = `${name}/`;
  envOf.set(store, env);
  return {
    store,
    residue: () => residue(s3, ceph.bucket, prefix),
    async cleanup() {
      await store.close();
      const ctx = { client: s3, bucket: ceph.bucket };
      const left = await residue(s3, ceph.bucket, prefix);
      await deleteObjects(ctx as never, left.filter((k) => !k.startsWith('upload ')).map((k) => prefix + k));
    },
  };
}

if (skip) {
  test('blob store contract: S3 on Ceph radosgw', { skip }, () => {});
} else {
  storageContract({
    name: 'S3 on Ceph radosgw',
    create: s3UnderTest,
    spawnChild(sut, args) {
      const env = envOf.get(sut.store);
      return spawnReadyChild('s3-storage-child.ts', args, { ...process.env, ...env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' });
    },
  });
}
