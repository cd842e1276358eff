/**
 * The server and the CLI on STORAGE_URL: start-up refusals in one line naming the setting, an
 * object-store outage answered 503 (nothing half-visible) and recovered from without a restart;
 * a radosgw that serves https.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { ListMultipartUploadsCommand } from '@aws-sdk/client-s3';
import { cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';
import { createPgDatabase, dropPgDatabase } from './helpers/database.ts';
import { runCli, scratchDataDir, startServer, storedBlobs, type TestServer } from './helpers/server.ts';
import { upload } from './helpers/http.ts';
import { spawnReadyChild } from './helpers/storage-contract.ts';
import { createS3Client } from '../src/storage/s3/client.ts';
import { partAddress, partRequest } from '../src/storage/s3/put-part.ts';
import type { S3Location } from '../src/config.ts';

const skip = cephSkip('Sluice on an S3 bucket (test/s3-server.test.ts)');
const MIB = 1024 * 1024;

describe('sluice with STORAGE_URL on radosgw', { skip }, () => {
  let ceph: Ceph;
  let srv: TestServer;
  const scratch = scratchDataDir('sl-s3cli-');
  before(async () => {
    ceph = await startCeph();
    // The s3 backend's shared bucket would be another cluster: this file names its own.
    process.env.SLUICE_TEST_CEPH = JSON.stringify({
      endpoint: ceph.endpoint, region: ceph.region, accessKeyId: ceph.accessKeyId, secretAccessKey: ceph.secretAccessKey, bucket: ceph.bucket,
    });
    srv = await startServer('s3');
  });
  after(async () => {
    await srv?.close();
    await ceph?.stop();
  });

  test('start-up: a missing bucket or wrong credentials stop serve and the CLI with one line naming the setting', async () => {
    const pg = await createPgDatabase();
    try {
      const base = scratch.env({ DATABASE_URL: pg.url, ...ceph.env() });
      const missing = await runCli(['serve'], { ...base, STORAGE_URL: 's3://no-such-bucket', PORT: '0', LOG_LEVEL: 'fatal' });
      assert.equal(missing.code, 1);
      assert.match(missing.stderr, /^sluice: STORAGE_URL: bucket s3:\/\/no-such-bucket at http:\/\/127\.0\.0\.1:\d+ does not exist; create it first\n$/m);
      const wrong = await runCli(['sweep'], { ...base, AWS_SECRET_ACCESS_KEY: 'wrong-secret' });
      assert.equal(wrong.code, 1);
      assert.match(wrong.stderr, /^sluice: AWS_ACCESS_KEY_ID\/AWS_SECRET_ACCESS_KEY: refused by s3:\/\/sluice-test/m);
      assert.equal(wrong.stderr.trim().split('\n').filter((l) => l.startsWith('sluice:')).length, 1, wrong.stderr);
      assert.doesNotMatch(missing.stderr + wrong.stderr, /NodeVersionSupportWarning/);
    } finally {
      await dropPgDatabase(pg.name);
    }
  });

  test('radosgw down: uploads answer 503 STORAGE_UNAVAILABLE with nothing kept; back up, the same server serves', async () => {
    const before = await storedBlobs(srv);
    await ceph.stopRgw();
    try {
      for (const size of [1000, 20 * MIB]) {
        const r = await upload(srv, [{ name: 'a.bin', data: randomBytes(size) }]);
        assert.equal(r.status, 503, r.text);
        assert.equal(r.json.code, 'STORAGE_UNAVAILABLE');
        assert.equal(r.json.success, false);
      }
    } finally {
      await ceph.startRgw();
    }
    const [row] = await srv.sql<{ n: number }[]>`select count(*)::int as n from files`;
    assert.equal(row!.n, 0, 'no row for the failed uploads');
    const data = randomBytes(7 * MIB);
    const ok = await upload(srv, [{ name: 'b.bin', data }]);
    assert.equal(ok.status, 201, ok.text);
    const res = await fetch(`${srv.url}${ok.json.files[0].download_url}`);
    assert.equal(res.status, 200);
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(data), 'the bytes come back');
    // A multipart upload the outage stranded is the sweeper's, once idle; none may be published.
    const now = await storedBlobs(srv);
    assert.equal(now.files.length, before.files.length + 1);
  });

  test('sluice sweep works on the bucket', async () => {
    const r = await srv.cli(['sweep']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^expired bundles: 0, /);
    const c = ceph.client();
    try {
      await c.send(new ListMultipartUploadsCommand({ Bucket: ceph.bucket }));
    } finally {
      c.destroy();
    }
  });
});

describe('sluice on a radosgw that serves https', { skip }, () => {
  let ceph: Ceph;
  let srv: TestServer;
  before(async () => {
    ceph = await startCeph({ tls: true });
    // The cluster's own certificate reaches the server through NODE_EXTRA_CA_CERTS (in ceph.env()).
    srv = await startServer('postgres', ceph.env('tls'));
  });
  after(async () => {
    await srv?.close();
    await ceph?.stop();
  });

  test('bodies go unsigned (UNSIGNED-PAYLOAD) and in slices, and the bytes come back whole', async () => {
    const credentials = { accessKeyId: ceph.accessKeyId, secretAccessKey: ceph.secretAccessKey };
    const https = createS3Client({ region: ceph.region, endpoint: ceph.endpoint, bucket: ceph.bucket, credentials } as S3Location);
    const http = createS3Client({ region: ceph.region, endpoint: 'http://127.0.0.1:9', bucket: ceph.bucket, credentials } as S3Location);
    try {
      // Parts (put-part.ts): the address the SDK gives, and the request built for it.
      const overTls = await partAddress(https, ceph.bucket, 'k', 'upload-id');
      const plain = await partAddress(http, ceph.bucket, 'k', 'upload-id');
      assert.equal(overTls.tls, true);
      assert.equal(partRequest(overTls, 2, Buffer.alloc(9)).headers['x-amz-content-sha256'], 'UNSIGNED-PAYLOAD');
      assert.equal(partRequest(plain, 2, Buffer.alloc(9)).headers['x-amz-content-sha256'], undefined, 'plain http: the signer hashes the payload');
      assert.equal(partRequest(plain, 2, Buffer.alloc(9)).query.partNumber, '2');
      // Other bodies (PutObject) go through the SDK, with these steps of ours.
      assert.ok(https.middlewareStack.identify().some((m) => m.startsWith('sluiceUnsignedPayload')));
      assert.ok(!http.middlewareStack.identify().some((m) => m.startsWith('sluiceUnsignedPayload')), 'plain http keeps the signed hash');
      // A part goes to the TLS socket in slices, so no ciphertext copy of all of it waits there.
      assert.ok(https.middlewareStack.identify().some((m) => m.startsWith('sluiceSlicedBody')));
      assert.ok(!http.middlewareStack.identify().some((m) => m.startsWith('sluiceSlicedBody')), 'plain http writes from the part itself');
    } finally {
      https.destroy();
      http.destroy();
    }
    // Eight parts of 6 MiB and a bit: every part of a multipart upload, and its completion, over https.
    const data = randomBytes(8 * 6 * MIB + 1000);
    const ok = await upload(srv, [{ name: 'big.bin', data }]);
    assert.equal(ok.status, 201, ok.text);
    const res = await fetch(`${srv.url}${ok.json.files[0].download_url}`);
    assert.equal(res.status, 200);
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(data), 'the bytes come back');
  });

  test('a retried part sends its whole body again', async () => {
    // In a child: only a process started with the cluster's certificate (NODE_EXTRA_CA_CERTS) trusts it.
    const { ready } = await spawnReadyChild('s3-retry-child.ts', [], { ...process.env, ...ceph.env() });
    assert.equal(ready, `2,${3 * MIB}/-1,true`, 'attempts, the bytes the failed one sent (-1: not counted), the object read back the same');
  });
});
