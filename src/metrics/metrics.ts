import { AggregatorRegistry, Registry, collectDefaultMetrics } from 'prom-client';
import type { Refusal } from '../thumbs/render-process.ts';
import { httpMetrics, pooledMetrics, refusalMetrics, sweepMetrics, trafficMetrics, transferMetrics } from './families.ts';

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
  /**
   * The current values of the named families (absent: not registered): this process's, or with
   * several workers every worker's summed, as a scrape would show them (the console's history reads these).
   */
  values(names: readonly string[]): Promise<Map<string, ReadonlyArray<{ value: number; labels: Partial<Record<string, string | number>> }>>>;
}

/** `gather`: with several worker processes, every worker's metrics (JSON) for one aggregated scrape. */
export function createMetrics(opts: { gather?: () => Promise<unknown[]> } = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  // Each step registers what it makes, and the exposition lists metrics in the order registered.
  const { perRoute, bytesInTotal, bytesOutTotal, trackInflight } = httpMetrics(registry);
  const { transfers, rateLimited, redisErrors, contentMisses, contentRefusals } = trafficMetrics(registers);
  const { aborts, stalled, capRejections, straight, dbErrors } = transferMetrics(registers);
  const { sweepRuns, swept, lastSweep, lastSweepTime } = sweepMetrics(registers);
  pooledMetrics(registers);
  const { unanswered, previewRefusals } = refusalMetrics(registers);
  // Zero series exist from the start, so rate() and absence alerts work before the first event.
  for (const reason of ['too_large', 'undecodable', 'memory', 'timeout', 'crashed'] as const) previewRefusals.inc({ reason }, 0);
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
    trackInflight,
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
    render: async () => ({ body: await (await gathered()).metrics(), contentType: registry.contentType }),
    async values(names) {
      const source = await gathered();
      const out = new Map<string, ReadonlyArray<{ value: number; labels: Partial<Record<string, string | number>> }>>();
      for (const name of names) {
        const metric = source.getSingleMetric(name);
        if (metric) out.set(name, (await metric.get()).values);
      }
      return out;
    },
  };

  /** This process's registry, or with several workers one summing every worker's metrics. */
  async function gathered(): Promise<Registry> {
    if (!opts.gather) return registry;
    const parts = (await opts.gather()) as Parameters<typeof AggregatorRegistry.aggregate>[0];
    return AggregatorRegistry.aggregate(parts.filter((p) => Array.isArray(p) && p.length > 0));
  }
}
