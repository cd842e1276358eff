/**
 * GET /metrics read by the Prometheus project's own parser (client_python's
 * text_string_to_metric_families; Debian/Ubuntu package python3-prometheus-client, installed by
 * .ci/run), then checked for the families the operator docs promise, with sane types and values.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { created } from './upload-util.ts';
import { file, upload } from './helpers/http.ts';
import { from, randomLoopback } from './access-util.ts';
import { prerequisite } from './helpers/prereq.ts';

const PY = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const PARSER = `
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type, "samples": [
        {"name": s.name, "labels": s.labels, "value": s.value if math.isfinite(s.value) else repr(s.value)} for s in f.samples]})
print(json.dumps(out))
`;
const parserMissing = prerequisite({
  what: '/metrics through the Prometheus parser (test/metrics-format.test.ts)',
  missing: ((): string | false => {
    const r = spawnSync(PY, ['-c', 'import prometheus_client.parser'], { encoding: 'utf8' });
    return r.status === 0 ? false : `the Prometheus parser is missing (${(r.stderr ?? String(r.error)).trim().split('\n').pop()})`;
  })(),
  install: 'apt-get install -y python3-prometheus-client',
});

interface Family { name: string; type: string; samples: Array<{ name: string; labels: Record<string, string>; value: number | string }> }

function parse(text: string): Map<string, Family> {
  const r = spawnSync(PY, ['-c', PARSER], { input: text, encoding: 'utf8', maxBuffer: 16 << 20 });
  assert.equal(r.status, 0, `the Prometheus parser rejected /metrics:\n${r.stderr}`);
  return new Map((JSON.parse(r.stdout) as Family[]).map((f) => [f.name, f]));
}

/** client_python names a counter family without its _total suffix. */
const EXPECTED: Array<[string, string, string]> = [
  ['sluice_http_requests', 'counter', 'requests by route and status'],
  ['sluice_http_request_duration_seconds', 'histogram', 'latency'],
  ['sluice_http_bytes_in', 'counter', 'bytes in'],
  ['sluice_http_bytes_out', 'counter', 'bytes out'],
  ['sluice_http_active_requests', 'gauge', 'active requests'],
  ['sluice_active_transfers', 'gauge', 'active uploads and downloads'],
  ['sluice_upload_aborts', 'counter', 'upload aborts'],
  ['sluice_upload_cap_rejections', 'counter', 'cap rejections'],
  ['sluice_rate_limit_rejections', 'counter', 'rate-limit rejections'],
  ['sluice_sweep_runs', 'counter', 'sweeper results'],
  ['sluice_sweep_removed', 'counter', 'sweeper results'],
  ['sluice_db_errors', 'counter', 'db errors'],
  ['sluice_redis_errors', 'counter', 'redis errors'],
  ['sluice_buffer_allocations', 'counter', 'buffer churn'],
  ['process_cpu_seconds', 'counter', 'process metrics'],
];

for (const backend of backends()) {
  describe(`/metrics through the Prometheus text parser (${backend})`, { skip: parserMissing }, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { HOST: '0.0.0.0', RATE_LIMIT_ANON_PER_HOUR: '3', ANON_MAX_BUNDLE_BYTES: '4096' });
    });
    after(() => srv?.close());

    test('every documented family is present with its type and sane values', async () => {
      const reply = await created(srv, [file('m.txt', 'metrics')]);
      const dl = await request(`${srv.url}${reply.files[0]!.download_url}`);
      assert.equal(await dl.body.text(), 'metrics');
      assert.equal((await upload(srv, [file('big.bin', Buffer.alloc(5000))])).status, 400);
      const agent = from(randomLoopback());
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        const r = await request(`http://127.0.0.1:${srv.port}/api/v1/bundle/abcde`, { dispatcher: agent });
        await r.body.dump();
        statuses.push(r.statusCode);
      }
      assert.deepEqual(statuses, [404, 404, 404, 429]);

      const res = await request(`${srv.url}/metrics`);
      assert.equal(res.statusCode, 200);
      const families = parse(await res.body.text());
      for (const [name, type, what] of EXPECTED) {
        assert.equal(families.get(name)?.type, type, `${what}: ${name} should be a ${type}`);
      }
      const sum = (family: string, sample: string, labels: Record<string, string> = {}): number =>
        families.get(family)!.samples
          .filter((s) => s.name === sample && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
          .reduce((n, s) => n + Number(s.value), 0);
      assert.ok(sum('sluice_http_requests', 'sluice_http_requests_total', { route: '/api/v1/upload', status: '201' }) >= 1);
      assert.ok(sum('sluice_http_requests', 'sluice_http_requests_total', { route: '/api/v1/download/:id', status: '200' }) >= 1);
      assert.equal(sum('sluice_rate_limit_rejections', 'sluice_rate_limit_rejections_total'), 1);
      assert.equal(sum('sluice_upload_cap_rejections', 'sluice_upload_cap_rejections_total'), 1);
      assert.ok(sum('sluice_http_bytes_in', 'sluice_http_bytes_in_total') >= 5000);
      assert.ok(sum('sluice_http_bytes_out', 'sluice_http_bytes_out_total') >= 'metrics'.length);
      const transfers = families.get('sluice_active_transfers')!.samples;
      assert.deepEqual(transfers.map((s) => [s.labels.kind, s.value]).sort(), [['download', 0], ['upload', 0]]);
      // Histogram: cumulative buckets ending in +Inf equal to the count.
      const route = { route: '/api/v1/bundle/:code' };
      const buckets = families.get('sluice_http_request_duration_seconds')!.samples.filter(
        (s) => s.name.endsWith('_bucket') && s.labels.route === route.route,
      );
      const values = buckets.map((b) => Number(b.value));
      assert.deepEqual(values, [...values].sort((a, b) => a - b), 'buckets are cumulative');
      assert.equal(buckets.at(-1)!.labels.le, '+Inf');
      assert.equal(values.at(-1), sum('sluice_http_request_duration_seconds', 'sluice_http_request_duration_seconds_count', route));
      assert.equal(values.at(-1), 4);
      assert.equal(sum('sluice_db_errors', 'sluice_db_errors_total'), 0);
      assert.equal(sum('sluice_redis_errors', 'sluice_redis_errors_total'), 0);
    });
  });
}
