/**
 * Per-request metrics at the cost of a few additions. prom-client's labelled `inc` and `observe`
 * hash and validate their label object on every call, a measurable share of a small request's
 * JavaScript; here each route of the table gets a recorder once, at mount, that counts into plain
 * numbers. The two families are exposed to prom-client's registry as collectors read at scrape
 * time, in the same shape its own Counter and Histogram produce (so aggregation across worker
 * processes and the text format are prom-client's).
 */

/** Records one finished request of its route: status, seconds from routing to settling. */
export type RouteRecorder = (status: number, seconds: number) => void;

/** What prom-client's Registry needs of a metric (`get()` as its own metrics return). */
export interface Collector {
  name: string;
  help: string;
  type: 'counter' | 'histogram';
  aggregator: 'sum';
  get(): Promise<{ name: string; help: string; type: string; aggregator: 'sum'; values: Sample[] }>;
  reset(): void;
}
interface Sample {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
}

interface Latency {
  route: string;
  /** Observations per bucket (not cumulative), plus one for +Inf. */
  buckets: Float64Array;
  sum: number;
  count: number;
}
interface Outcomes {
  route: string;
  method: string;
  /** Requests by status. */
  byStatus: Map<number, number>;
}

export function createRouteMetrics(opts: { requestsName: string; durationName: string; bounds: readonly number[] }): {
  forRoute(route: string, method: string): RouteRecorder;
  collectors: [Collector, Collector];
} {
  const { bounds } = opts;
  const latencies = new Map<string, Latency>();
  const outcomes: Outcomes[] = [];

  const requests: Collector = {
    name: opts.requestsName,
    help: 'HTTP requests by route pattern, route method and status (0: client went away before a status)',
    type: 'counter',
    aggregator: 'sum',
    get: async () => {
      const values: Sample[] = [];
      for (const o of outcomes) {
        for (const [status, n] of o.byStatus) values.push({ value: n, labels: { route: o.route, method: o.method, status } });
      }
      return { name: requests.name, help: requests.help, type: requests.type, aggregator: 'sum', values };
    },
    reset: () => outcomes.forEach((o) => o.byStatus.clear()),
  };

  const duration: Collector = {
    name: opts.durationName,
    help: 'Time from routing to the handler settling, by route pattern',
    type: 'histogram',
    aggregator: 'sum',
    get: async () => {
      const values: Sample[] = [];
      const bucketName = `${duration.name}_bucket`;
      for (const l of latencies.values()) {
        if (l.count === 0) continue;
        let acc = 0;
        bounds.forEach((le, i) => {
          acc += l.buckets[i]!;
          values.push({ value: acc, labels: { le, route: l.route }, metricName: bucketName });
        });
        values.push({ value: l.count, labels: { le: '+Inf', route: l.route }, metricName: bucketName });
        values.push({ value: l.sum, labels: { route: l.route }, metricName: `${duration.name}_sum` });
        values.push({ value: l.count, labels: { route: l.route }, metricName: `${duration.name}_count` });
      }
      return { name: duration.name, help: duration.help, type: duration.type, aggregator: 'sum', values };
    },
    reset: () => {
      for (const l of latencies.values()) {
        l.buckets.fill(0);
        l.sum = 0;
        l.count = 0;
      }
    },
  };

  return {
    forRoute(route, method) {
      // One latency series per route pattern, shared by its methods.
      let latency = latencies.get(route);
      if (!latency) {
        latency = { route, buckets: new Float64Array(bounds.length + 1), sum: 0, count: 0 };
        latencies.set(route, latency);
      }
      const lat = latency;
      const outcome: Outcomes = { route, method, byStatus: new Map() };
      outcomes.push(outcome);
      return (status, seconds) => {
        outcome.byStatus.set(status, (outcome.byStatus.get(status) ?? 0) + 1);
        let i = 0;
        while (i < bounds.length && seconds > bounds[i]!) i++;
        lat.buckets[i]!++;
        lat.sum += seconds;
        lat.count++;
      };
    },
    collectors: [requests, duration],
  };
}
