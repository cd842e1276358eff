import { bodyFlowStats } from '../http/body-flow.ts';
import { AggregatorRegistry, Counter, Gauge, Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import { createRouteMetrics } from './routes.ts';
import { freshAllocations } from '../util/spare-buffers.ts';
import type { Refusal } from '../thumbs/render-process.ts';

/**
 * Prometheus metrics of one process. Every helper only increments or observes: nothing here
 * allocates per body chunk, and labels come from the route table (finite), never from the client.
 */
export interface Metrics {
  readonly registry: Registry;
  /**
   * The recorder of one route of the table (`route` its pattern, `method` its method), made once at
   * mount: it records each finished request's status, duration and body bytes.
   */
  forRoute(route: string, method: string): (status: number, seconds: number, bytesIn: number, bytesOut: number) => void;
  /** Reads the in-flight count at scrape time (the server owns the number). */
  trackInflight(read: () => number): void;
  /** An upload or download starts (+1) or ends (-1). */
  transfer(kind: 'upload' | 'download', delta: 1 | -1): void;
  uploadAborted(): void;
  /** A response was closed because its client took no bytes for the stall timeout. */
  stalledClosed(): void;
  /** A request got 503 because its result did not come in time (server.ts ANSWER_WAIT_MS). */
  unanswered(): void;
  capRejected(): void;
  /** File bytes of a multipart upload written from the socket's chunk without busboy (see ingest/multipart.ts). */
  straightToFile(bytes: number): void;
  dbError(): void;
  /** A Redis command failed or timed out (the request itself failed open). */
  redisError(): void;
  /** A web content request was answered 404 (spends the miss budget). */
  contentMiss(): void;
  /** A web content request was refused 429 by the content budget (`requests`) or the miss budget (`misses`). */
  contentRefused(budget: 'requests' | 'misses'): void;
  /** An image got no preview: too large from its header, undecodable, or its render process was killed. */
  previewRefused(reason: Refusal): void;
  /** A sweep ended: what it removed, by kind (`hashedFiles` counts files hashed, not removed). */
  sweepDone(result: Readonly<Record<string, number>>): void;
  sweepFailed(): void;
  /** The exposition text and its content type. */
  render(): Promise<{ body: string; contentType: string }>;
}

/** `gather`: with several worker processes, every worker's metrics (JSON) for one aggregated scrape. */
export function createMetrics(opts: { gather?: () => Promise<unknown[]> } = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
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
  for (const reason of ['too_large', 'undecodable', 'memory', 'timeout', 'crashed'] as const) previewRefusals.inc({ reason }, 0);
  // Zero series exist from the start, so rate() and absence alerts work before the first event.
  sweepRuns.inc({ outcome: 'ok' }, 0);
  transfers.set({ kind: 'upload' }, 0);
  transfers.set({ kind: 'download' }, 0);
  sweepRuns.inc({ outcome: 'error' }, 0);
  contentRefusals.inc({ budget: 'requests' }, 0);
  contentRefusals.inc({ budget: 'misses' }, 0);

  return {
    registry,
    forRoute(route, method) {
      const record = perRoute.forRoute(route, method);
      return (status, seconds, bytesIn, bytesOut) => {
        record(status, seconds);
        if (bytesIn > 0) bytesInTotal.inc(bytesIn);
        if (bytesOut > 0) bytesOutTotal.inc(bytesOut);
        if (status === 429) rateLimited.inc();
      };
    },
    transfer: (kind, delta) => transfers.inc({ kind }, delta),
    trackInflight(read) {
      readInflight = read;
    },
    uploadAborted: () => aborts.inc(),
    stalledClosed: () => stalled.inc(),
    unanswered: () => unanswered.inc(),
    capRejected: () => capRejections.inc(),
    straightToFile: (bytes) => straight.inc(bytes),
    dbError: () => dbErrors.inc(),
    redisError: () => redisErrors.inc(),
    contentMiss: () => contentMisses.inc(),
    contentRefused: (budget) => contentRefusals.inc({ budget }),
    previewRefused: (reason) => previewRefusals.inc({ reason }),
    sweepDone(result) {
      sweepRuns.inc({ outcome: 'ok' });
      // Files hashed for the blocklist are kept, not removed: the log line counts them.
      const { hashedFiles: _hashed, ...removed } = result;
      for (const [kind, n] of Object.entries(removed) as Array<[string, number]>) {
        swept.inc({ kind }, n);
        lastSweep.set({ kind }, n);
      }
      lastSweepTime.set(Date.now() / 1000);
    },
    sweepFailed: () => sweepRuns.inc({ outcome: 'error' }),
    render: async () => {
      if (!opts.gather) return { body: await registry.metrics(), contentType: registry.contentType };
      const parts = (await opts.gather()) as Parameters<typeof AggregatorRegistry.aggregate>[0];
      const all = AggregatorRegistry.aggregate(parts.filter((p) => Array.isArray(p) && p.length > 0));
      return { body: await all.metrics(), contentType: registry.contentType };
    },
  };
}
