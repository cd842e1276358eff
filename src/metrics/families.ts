import { Counter, Gauge, type Metric, type Registry } from 'prom-client';
import { bodyFlowStats } from '../http/body-flow.ts';
import { freshAllocations } from '../util/spare-buffers.ts';
import { createRouteMetrics } from './routes.ts';

// The metric families of metrics.ts, by area. Each function registers its families as it makes them,
// so the order of the calls is the order of the exposition.

/** Requests and durations per route, body bytes, and the requests in flight (read at scrape time). */
export function httpMetrics(registry: Registry) {
  const registers = [registry];
  const perRoute = createRouteMetrics({
    requestsName: 'sluice_http_requests_total',
    durationName: 'sluice_http_request_duration_seconds',
    bounds: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  });
  for (const c of perRoute.collectors) registry.registerMetric(c as unknown as Metric);
  const bytesInTotal = new Counter({
    name: 'sluice_http_bytes_in_total',
    help: 'Request body bytes, from the Content-Length of routed requests',
    registers,
  });
  const bytesOutTotal = new Counter({
    name: 'sluice_http_bytes_out_total',
    help: 'Response body bytes of responses handed to the socket in full',
    registers,
  });
  let readInflight: () => number = () => 0;
  new Gauge({
    name: 'sluice_http_active_requests',
    help: 'Requests whose handler has not settled yet',
    registers,
    collect() {
      this.set(readInflight());
    },
  });
  const trackInflight = (read: () => number): void => {
    readInflight = read;
  };
  return { perRoute, bytesInTotal, bytesOutTotal, trackInflight };
}

/** Transfers in progress, the rate limits and content budgets, and failed Redis commands. */
export function trafficMetrics(registers: Registry[]) {
  const transfers = new Gauge({
    name: 'sluice_active_transfers',
    help: 'Uploads (multipart and tus PATCH) and downloads (files and zips) in progress',
    labelNames: ['kind'] as const,
    registers,
  });
  const rateLimited = new Counter({
    name: 'sluice_rate_limit_rejections_total',
    help: 'Requests answered 429 (API budget, content budgets, or the wrong-password throttle)',
    registers,
  });
  const redisErrors = new Counter({
    name: 'sluice_redis_errors_total',
    help: 'Redis commands that failed or timed out (requests fail open meanwhile)',
    registers,
  });
  const contentMisses = new Counter({
    name: 'sluice_content_misses_total',
    help: 'Web content requests answered 404 (what enumeration produces; each spends the miss budget)',
    registers,
  });
  const contentRefusals = new Counter({
    name: 'sluice_content_rate_limited_total',
    help: 'Web content requests answered 429, by budget: requests (per minute) or misses (per hour)',
    labelNames: ['budget'] as const,
    registers,
  });
  return { transfers, rateLimited, redisErrors, contentMisses, contentRefusals };
}

/** Uploads and downloads cut short (aborted, stalled, over the cap), bytes past the multipart parser, database errors. */
export function transferMetrics(registers: Registry[]) {
  const aborts = new Counter({ name: 'sluice_upload_aborts_total', help: 'Uploads the client abandoned mid-body', registers });
  const stalled = new Counter({
    name: 'sluice_stalled_responses_closed_total',
    help: 'Responses closed because the client accepted no bytes for DOWNLOAD_STALL_TIMEOUT_SECONDS',
    registers,
  });
  const capRejections = new Counter({
    name: 'sluice_upload_cap_rejections_total',
    help: 'Uploads refused for exceeding the bundle size cap (SIZE_EXCEEDED)',
    registers,
  });
  const straight = new Counter({
    name: 'sluice_multipart_straight_bytes_total',
    help: 'Multipart file bytes written straight from the socket to the file, past the multipart parser',
    registers,
  });
  const dbErrors = new Counter({ name: 'sluice_db_errors_total', help: 'Requests answered DATABASE_ERROR', registers });
  return { aborts, stalled, capRejections, straight, dbErrors };
}

/** Periodic sweeps: runs by outcome, and what they removed. */
export function sweepMetrics(registers: Registry[]) {
  const sweepRuns = new Counter({
    name: 'sluice_sweep_runs_total',
    help: 'Periodic sweeps by outcome',
    labelNames: ['outcome'] as const,
    registers,
  });
  const swept = new Counter({
    name: 'sluice_sweep_removed_total',
    help: 'Items removed by periodic sweeps, by kind',
    labelNames: ['kind'] as const,
    registers,
  });
  const lastSweep = new Gauge({
    name: 'sluice_sweep_last_removed',
    help: 'Items removed by the last successful periodic sweep, by kind',
    labelNames: ['kind'] as const,
    registers,
  });
  const lastSweepTime = new Gauge({
    name: 'sluice_sweep_last_success_timestamp_seconds',
    help: 'Unix time of the last successful periodic sweep',
    registers,
  });
  return { sweepRuns, swept, lastSweep, lastSweepTime };
}

/** Counts the buffer pools and the body flow keep themselves, copied in at scrape time. */
export function pooledMetrics(registers: Registry[]): void {
  new Counter({
    name: 'sluice_buffer_allocations_total',
    help: 'Upload and download buffers allocated because none was free to reuse, by pool (a steady climb means churn)',
    labelNames: ['pool'] as const,
    registers,
    collect() {
      this.reset();
      for (const [pool, n] of freshAllocations()) this.inc({ pool }, n);
    },
  });
  new Counter({
    name: 'sluice_body_spilled_bytes_total',
    help: 'Request body bytes that arrived while their upload waited and went to a spill file (uWS builds for Node 22 and later)',
    registers,
    collect() {
      this.reset();
      this.inc(bodyFlowStats().spilled);
    },
  });
  new Counter({
    name: 'sluice_body_overruns_total',
    help: 'Requests cut off because their queued body passed its bound (503 BODY_OVERRUN)',
    registers,
    collect() {
      this.reset();
      this.inc(bodyFlowStats().overruns);
    },
  });
}

/** Requests answered 503 for want of a timely result, and images refused a preview. */
export function refusalMetrics(registers: Registry[]) {
  const unanswered = new Counter({
    name: 'sluice_requests_unanswered_total',
    help: 'Requests answered 503 because their result did not come within 6 s (a stalled database or store)',
    registers,
  });
  const previewRefusals = new Counter({
    name: 'sluice_preview_refused_total',
    help: 'Images that got no preview, by reason (too_large: from the header; memory: the render process went over its budget and was killed)',
    labelNames: ['reason'] as const,
    registers,
  });
  return { unanswered, previewRefusals };
}
