// The console overview's history of this node's traffic, kept in memory: the last hour at every
// sample, the last day one point a minute. Both rings are allocated at their full size once (about
// 160 KB with samples every 10 s, 450 KB at one a second), so memory grows with neither uptime nor
// traffic. A restart starts an empty history: it is "this node's traffic since it started".
import type { Logger } from 'pino';
import type { Metrics } from './metrics.ts';

/** What a sample holds. The first seven are counters, kept as increments; the transfers are gauges. */
export const NODE_SERIES = ['requests', 'clientErrors', 'serverErrors', 'bytesIn', 'bytesOut', 'rateLimited', 'contentRefused', 'uploads', 'downloads'] as const;
export type NodeSeries = (typeof NODE_SERIES)[number];
const COUNTERS = 7;
const WIDTH = NODE_SERIES.length;

/** One reading of the metrics: counters as totals since the process started, gauges as they are now. */
export type Reading = Readonly<Record<NodeSeries, number>>;

export type Range = 'hour' | 'day';
export const RANGE_SECONDS: Readonly<Record<Range, number>> = { hour: 3600, day: 86_400 };

/** A range's points: counters per second, gauges as read (a day's point: the minute's highest). */
export interface NodeSeriesData {
  /** Seconds between points. */
  readonly step: number;
  /** Unix seconds, each the end of its point's interval. */
  readonly t: number[];
  readonly values: Record<NodeSeries, number[]>;
}

/** The figures of the page's text, from the readings. */
export interface NodeSummary {
  /** Unix seconds of the first reading (the node's start, near enough) and of the latest. */
  readonly since: number;
  readonly at: number;
  /** Counters: increments since the first reading, per second over the last minute, increments over the last hour. */
  readonly total: Record<NodeSeries, number>;
  readonly perSecond: Record<NodeSeries, number>;
  readonly lastHour: Record<NodeSeries, number>;
  /** Gauges as last read. */
  readonly uploads: number;
  readonly downloads: number;
}

export interface History {
  /** Seconds between samples. */
  readonly step: number;
  /** A reading taken at `atMs` (ms since the epoch); the first is the baseline the others count from. */
  record(atMs: number, reading: Reading): void;
  series(range: Range): NodeSeriesData;
  /** Null before the second reading. */
  summary(): NodeSummary | null;
}

export function createHistory(stepSeconds: number): History {
  // One slot beyond the range: the oldest point still inside it is kept when the newest arrives.
  const hour = createRing(Math.ceil(RANGE_SECONDS.hour / stepSeconds) + 1);
  const day = createRing(RANGE_SECONDS.day / 60 + 1);
  const row = new Float64Array(WIDTH);
  const total = new Float64Array(WIDTH);
  // The minute being summed into the day ring: counters added, gauges at their highest.
  const minute = { index: -1, row: new Float64Array(WIDTH), span: 0 };
  let since = 0;
  let last: { at: number; reading: Reading } | null = null;
  return {
    step: stepSeconds,
    record(atMs, reading) {
      const at = atMs / 1000;
      if (!last) {
        since = at;
        last = { at, reading };
        minute.index = Math.floor(at / 60);
        return;
      }
      const span = at - last.at;
      if (span <= 0) return;
      // A counter that went down was reset (a worker replaced): that interval counts nothing.
      for (let i = 0; i < WIDTH; i++) row[i] = i < COUNTERS ? Math.max(0, reading[NODE_SERIES[i]!] - last.reading[NODE_SERIES[i]!]) : reading[NODE_SERIES[i]!];
      for (let i = 0; i < COUNTERS; i++) total[i]! += row[i]!;
      hour.push(at, span, row);
      const index = Math.floor(at / 60);
      if (index !== minute.index) {
        if (minute.span > 0) day.push((minute.index + 1) * 60, minute.span, minute.row);
        minute.row.fill(0);
        minute.span = 0;
        minute.index = index;
      }
      for (let i = 0; i < WIDTH; i++) minute.row[i] = i < COUNTERS ? minute.row[i]! + row[i]! : Math.max(minute.row[i]!, row[i]!);
      minute.span += span;
      last = { at, reading };
    },
    series(range) {
      const values = Object.fromEntries(NODE_SERIES.map((k) => [k, [] as number[]])) as Record<NodeSeries, number[]>;
      const t: number[] = [];
      const from = (last?.at ?? 0) - RANGE_SECONDS[range];
      const point = (at: number, span: number, r: Float64Array): void => {
        t.push(Math.round(at));
        NODE_SERIES.forEach((k, i) => values[k].push(i < COUNTERS ? round(r[i]! / span) : r[i]!));
      };
      (range === 'hour' ? hour : day).each(from, point);
      // The day ends with the minute in progress, so far.
      if (range === 'day' && last && minute.span > 0) point(last.at, minute.span, minute.row);
      return { step: range === 'hour' ? stepSeconds : 60, t, values };
    },
    summary() {
      if (!last || hour.size() === 0) return null;
      const minuteSum = new Float64Array(WIDTH);
      const hourSum = new Float64Array(WIDTH);
      let minuteSpan = 0;
      hour.each(last.at - 3600, (at, span, r) => {
        for (let i = 0; i < COUNTERS; i++) hourSum[i]! += r[i]!;
        if (at <= last!.at - 60) return;
        for (let i = 0; i < COUNTERS; i++) minuteSum[i]! += r[i]!;
        minuteSpan += span;
      });
      const byName = (a: Float64Array, scale = 1): Record<NodeSeries, number> =>
        Object.fromEntries(NODE_SERIES.map((k, i) => [k, i < COUNTERS ? round(a[i]! * scale) : 0])) as Record<NodeSeries, number>;
      return {
        since: Math.round(since),
        at: Math.round(last.at),
        total: byName(total),
        perSecond: byName(minuteSum, minuteSpan > 0 ? 1 / minuteSpan : 0),
        lastHour: byName(hourSum),
        uploads: last.reading.uploads,
        downloads: last.reading.downloads,
      };
    },
  };
}

/** A fixed number of slots, each an end time, the seconds it covers and one value per series; the oldest is overwritten. */
function createRing(slots: number) {
  const ends = new Float64Array(slots);
  const spans = new Float64Array(slots);
  const values = new Float64Array(slots * WIDTH);
  let next = 0;
  let size = 0;
  return {
    size: () => size,
    push(at: number, span: number, row: Float64Array): void {
      ends[next] = at;
      spans[next] = span;
      values.set(row, next * WIDTH);
      next = (next + 1) % slots;
      size = Math.min(size + 1, slots);
    },
    /** Oldest first, the slots that end after `from`. */
    each(from: number, fn: (at: number, span: number, row: Float64Array) => void): void {
      for (let k = size; k > 0; k--) {
        const i = (next - k + slots) % slots;
        if (ends[i]! > from) fn(ends[i]!, spans[i]!, values.subarray(i * WIDTH, (i + 1) * WIDTH));
      }
    },
  };
}

/** Three decimals: enough for a chart, and the JSON stays small. */
const round = (x: number): number => Math.round(x * 1000) / 1000;

const FAMILIES = {
  requests: 'sluice_http_requests_total',
  bytesIn: 'sluice_http_bytes_in_total',
  bytesOut: 'sluice_http_bytes_out_total',
  rateLimited: 'sluice_rate_limit_rejections_total',
  contentRefused: 'sluice_content_rate_limited_total',
  transfers: 'sluice_active_transfers',
} as const;

/**
 * The reading the history keeps, from the metrics a scrape would show: requests (4xx and 5xx apart),
 * body bytes, every 429 and those of the content budgets, and the transfers in progress.
 */
export async function readTraffic(metrics: Pick<Metrics, 'values'>): Promise<Reading> {
  const got = await metrics.values(Object.values(FAMILIES));
  type Labels = Partial<Record<string, string | number>>;
  const sum = (name: string, keep: (l: Labels) => boolean = () => true): number =>
    (got.get(name) ?? []).reduce((s, v) => (keep(v.labels) ? s + v.value : s), 0);
  const status = (from: number) => (l: Labels) => Number(l.status) >= from && Number(l.status) < from + 100;
  return {
    requests: sum(FAMILIES.requests),
    clientErrors: sum(FAMILIES.requests, status(400)),
    serverErrors: sum(FAMILIES.requests, status(500)),
    bytesIn: sum(FAMILIES.bytesIn),
    bytesOut: sum(FAMILIES.bytesOut),
    rateLimited: sum(FAMILIES.rateLimited),
    contentRefused: sum(FAMILIES.contentRefused),
    uploads: sum(FAMILIES.transfers, (l) => l.kind === 'upload'),
    downloads: sum(FAMILIES.transfers, (l) => l.kind === 'download'),
  };
}

export interface Sampler {
  /** Stops sampling and waits for a sample being taken. */
  close(): Promise<void>;
}

/**
 * Reads the metrics into `history` now and every `intervalMs`, then runs `also` (the cluster's
 * sample, which decides itself whether it is due). A sample still running makes the next tick a
 * no-op; a failure is logged and the next tick tries again. The timer does not hold the process open.
 */
export function startSampler(o: { history: History; intervalMs: number; read: () => Promise<Reading>; also?: () => Promise<unknown>; log: Logger }): Sampler {
  let running: Promise<void> | null = null;
  let closed = false;
  const sample = async (): Promise<void> => {
    const at = Date.now();
    try {
      o.history.record(at, await o.read());
    } catch (err) {
      o.log.warn({ err }, 'console history: reading the metrics failed');
    }
    if (closed) return;
    await o.also?.().catch((err: unknown) => o.log.warn({ err }, 'console history: the cluster sample failed'));
  };
  const tick = (): void => {
    if (running || closed) return;
    running = sample().finally(() => (running = null));
  };
  tick();
  const timer = setInterval(tick, o.intervalMs);
  timer.unref();
  return {
    async close() {
      closed = true;
      clearInterval(timer);
      await running;
    },
  };
}
