// The console's overview (/admin): this node's traffic from its in-memory history (metrics/history.ts)
// and the cluster's figures from the database (db/console-samples.ts), as text on the page and as
// series for the charts at /admin/overview.json?range=hour|day.
import type { Route } from '../../http/server.ts';
import type { Ctx } from '../../http/context.ts';
import { sendJson } from '../../http/reply.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';
import { RANGE_SECONDS, type NodeSummary, type Range } from '../../metrics/history.ts';
import { CLUSTER_EVERY, clusterSamples, type ClusterSample } from '../../db/console-samples.ts';
import { overviewBody, overviewFigures, type Figures } from '../../web/admin/overview.ts';

/** The cluster's series: as sampled, plus the growth between samples in bytes per hour. */
interface ClusterSeries {
  readonly step: number;
  readonly t: number[];
  readonly storedBytes: Array<number | null>;
  readonly storedGrowth: Array<number | null>;
  readonly liveBundles: Array<number | null>;
  readonly openReports: Array<number | null>;
}

export function adminOverviewRoutes(deps: Deps, c: Console): Route[] {
  const clusterStep = (deps.config.consoleSampleMs / 1000) * CLUSTER_EVERY;
  const rangeOf = (ctx: Ctx): Range => (ctx.query.get('range') === 'day' ? 'day' : 'hour');
  /** This node's summary, the cluster's samples of the last day (the growth figures need them), and the figures of both. */
  const load = async (): Promise<{ summary: NodeSummary | null; day: ClusterSample[]; figures: Figures }> => {
    const day = await clusterSamples(deps.sql, RANGE_SECONDS.day);
    const summary = deps.history?.summary() ?? null;
    return { summary, day, figures: overviewFigures(summary, day) };
  };
  return [
    ...c.page('/admin', async (ctx, s) => {
      const { figures } = await load();
      const body = overviewBody({ range: rangeOf(ctx), figures, history: deps.history !== undefined, clusterStep });
      c.render(ctx, s, { title: 'Overview', active: 'overview', body, scripts: ['uplot.js', 'admin-overview.js'], styles: ['uplot.css'] });
    }),
    ...c.page('/admin/overview.json', async (ctx) => {
      const range = rangeOf(ctx);
      const { summary, day, figures } = await load();
      const node = deps.history ? { since: summary?.since ?? null, ...flatten(deps.history.series(range)) } : null;
      const from = Date.now() / 1000 - RANGE_SECONDS[range];
      const cluster = clusterSeries(day.filter((x) => x.at > from), clusterStep);
      sendJson(ctx, 200, { range, node, cluster, figures });
    }),
  ];
}

/** `{step, t, values: {k: []}}` as `{step, t, k: []}`: each chart picks its keys from one object. */
function flatten<V>(s: { step: number; t: number[]; values: Record<string, V> }): Record<string, unknown> {
  return { step: s.step, t: s.t, ...s.values };
}

function clusterSeries(samples: readonly ClusterSample[], step: number): ClusterSeries {
  const growth = samples.map((s, i) => {
    const prev = samples[i - 1];
    if (!prev || prev.storedBytes === null || s.storedBytes === null) return null;
    return Math.round(((s.storedBytes - prev.storedBytes) / (s.at - prev.at)) * 3600);
  });
  return {
    step,
    t: samples.map((s) => s.at),
    storedBytes: samples.map((s) => s.storedBytes),
    storedGrowth: growth,
    liveBundles: samples.map((s) => s.liveBundles),
    openReports: samples.map((s) => s.openReports),
  };
}
