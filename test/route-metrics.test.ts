import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry, type Metric } from 'prom-client';
import { createRouteMetrics } from '../src/metrics/routes.ts';

test('route recorders count by status and fill cumulative buckets as prom-client does', async () => {
  const m = createRouteMetrics({ requestsName: 'req_total', durationName: 'dur_seconds', bounds: [0.1, 1] });
  const get = m.forRoute('/a/:id', 'get');
  const del = m.forRoute('/a/:id', 'del');
  get(200, 0.1); // on a bound: that bucket (le is inclusive)
  get(200, 0.5);
  get(404, 2);
  del(204, 0.05);
  const registry = new Registry();
  for (const c of m.collectors) registry.registerMetric(c as unknown as Metric);
  const text = await registry.metrics();
  const line = (s: string): number => Number(new RegExp(`^${s.replace(/[{}()+.]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);
  assert.equal(line('req_total{route="/a/:id",method="get",status="200"}'), 2);
  assert.equal(line('req_total{route="/a/:id",method="get",status="404"}'), 1);
  assert.equal(line('req_total{route="/a/:id",method="del",status="204"}'), 1);
  // Both methods share the route's latency series.
  assert.equal(line('dur_seconds_bucket{le="0.1",route="/a/:id"}'), 2);
  assert.equal(line('dur_seconds_bucket{le="1",route="/a/:id"}'), 3);
  assert.equal(line('dur_seconds_bucket{le="+Inf",route="/a/:id"}'), 4);
  assert.equal(line('dur_seconds_count{route="/a/:id"}'), 4);
  assert.ok(Math.abs(line('dur_seconds_sum{route="/a/:id"}') - 2.65) < 1e-9);
  assert.match(text, /# TYPE req_total counter/);
  assert.match(text, /# TYPE dur_seconds histogram/);
  // A route never requested has no latency series yet.
  m.forRoute('/b', 'get');
  assert.doesNotMatch(await registry.metrics(), /route="\/b"/);
});
