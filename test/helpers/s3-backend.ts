/**
 * The bucket of the `s3` test backend. test/run.ts starts one Ceph cluster for the whole run and
 * names it in SLUICE_TEST_CEPH; a test file run on its own with SLUICE_TEST_BACKENDS=s3 starts its
 * own cluster, stopped when the process exits.
 */
import { S3Client } from '@aws-sdk/client-s3';
import { startCeph, type Ceph } from './ceph.ts';

export type Bucket = Pick<Ceph, 'endpoint' | 'region' | 'accessKeyId' | 'secretAccessKey' | 'bucket'>;

export interface SharedBucket extends Bucket {
  /** STORAGE_URL (with the prefix) and the SDK's variables for a Sluice process. */
  env(prefix: string): Record<string, string>;
  client(): S3Client;
}

let shared: Promise<SharedBucket> | null = null;

export function sharedBucket(): Promise<SharedBucket> {
  shared ??= (async () => {
    const named = process.env.SLUICE_TEST_CEPH;
    let b: Bucket;
    if (named) {
      b = JSON.parse(named) as Bucket;
    } else {
      const ceph = await startCeph();
      process.once('exit', () => ceph.stopSync());
      b = ceph;
    }
    return {
      ...b,
      env: (prefix) => bucketEnv(b, prefix),
      client: () =>
        new S3Client({
          endpoint: b.endpoint, region: b.region, forcePathStyle: true,
          credentials: { accessKeyId: b.accessKeyId, secretAccessKey: b.secretAccessKey },
          requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED',
        }),
    };
  })();
  return shared;
}

export function bucketEnv(b: Bucket, prefix?: string): Record<string, string> {
  return {
    STORAGE_URL: `s3://${b.bucket}${prefix ? `/${prefix}` : ''}`,
    AWS_ACCESS_KEY_ID: b.accessKeyId,
    AWS_SECRET_ACCESS_KEY: b.secretAccessKey,
    AWS_REGION: b.region,
    AWS_ENDPOINT_URL_S3: b.endpoint,
  };
}
