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

  const requests = collector(
    opts.requestsName,
    'HTTP requests by route pattern, route method and status (0: client went away before a status)',
    'counter',
    () =>
      outcomes.flatMap((o) => [...o.byStatus].map(([status, n]) => ({ value: n, labels: { route: o.route, method: o.method, status } }))),
    () => outcomes.forEach((o) => o.byStatus.clear()),
  );

  const name = opts.durationName;
  const duration = collector(
    name,
    'Time from routing to the handler settling, by route pattern',
    'histogram',
    () => {
      const values: Sample[] = [];
      for (const { route, buckets, sum, count } of latencies.values()) {
        if (count === 0) continue;
        let acc = 0;
        bounds.forEach((le, i) => {
          acc += buckets[i]!;
          values.push({ value: acc, labels: { le, route }, metricName: `${name}_bucket` });
        });
        values.push({ value: count, labels: { le: '+Inf', route }, metricName: `${name}_bucket` });
        values.push({ value: sum, labels: { route }, metricName: `${name}_sum` });
        values.push({ value: count, labels: { route }, metricName: `${name}_count` });
      }
      return values;
    },
    () => {
      for (const l of latencies.values()) {
        l.buckets.fill(0);
        l.sum = 0;
        l.count = 0;
      }
    },
  );

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

function collector(name: string, help: string, type: Collector['type'], samples: () => Sample[], reset: () => void): Collector {
  return { name, help, type, aggregator: 'sum', get: async () => ({ name, help, type, aggregator: 'sum', values: samples() }), reset };
}
