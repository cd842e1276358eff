// The console's overview page: the current figures as text (the page is useful without scripts),
// and one chart container per figure, which admin-overview.js fills with uPlot from
// /admin/overview.json and refreshes every 10 seconds.
import { html, humanSize, type Safe } from '../../util/html.ts';
import { sqlUtc } from '../../util/time.ts';
import type { NodeSummary, Range } from '../../metrics/history.ts';
import type { ClusterSample } from '../../db/console-samples.ts';

interface ChartDef {
  readonly id: string;
  readonly title: string;
  /** The unit of the values, shown under the title. */
  readonly unit: string;
  /** `node`: this node's traffic (memory); `cluster`: the database's figures. */
  readonly source: 'node' | 'cluster';
  /** [key in the JSON, legend label] */
  readonly series: ReadonlyArray<readonly [string, string]>;
  /** How the axis and the legend write a value: a rate, a whole count (whole steps), or bytes. */
  readonly format: 'number' | 'count' | 'bytes';
}

export const CHARTS: readonly ChartDef[] = [
  { id: 'requests', title: 'Requests and errors', unit: 'requests per second', source: 'node', series: [['requests', 'All'], ['clientErrors', '4xx'], ['serverErrors', '5xx']], format: 'number' },
  { id: 'bytes', title: 'Bytes in and out', unit: 'bytes per second (request and response bodies)', source: 'node', series: [['bytesIn', 'In'], ['bytesOut', 'Out']], format: 'bytes' },
  { id: 'transfers', title: 'Transfers in progress', unit: 'uploads and downloads at each sample (a day: each minute’s highest)', source: 'node', series: [['uploads', 'Uploads'], ['downloads', 'Downloads']], format: 'count' },
  { id: 'refusals', title: 'Refusals', unit: 'requests refused per second', source: 'node', series: [['rateLimited', 'Every 429'], ['contentRefused', 'Content budgets']], format: 'number' },
  { id: 'storage', title: 'Storage used', unit: 'bytes stored, whole cluster', source: 'cluster', series: [['storedBytes', 'Stored']], format: 'bytes' },
  { id: 'growth', title: 'Storage growth', unit: 'bytes per hour, whole cluster (a sweep shows as a drop)', source: 'cluster', series: [['storedGrowth', 'Growth']], format: 'bytes' },
  { id: 'bundles', title: 'Live bundles', unit: 'bundles, whole cluster', source: 'cluster', series: [['liveBundles', 'Live']], format: 'count' },
  { id: 'reports', title: 'Open reports', unit: 'reports, whole cluster', source: 'cluster', series: [['openReports', 'Open']], format: 'count' },
];

/** The figures of the page's text, by key: the page renders them and the JSON carries them for the script. */
export type Figures = Record<(typeof FIGURE_ROWS)[number][0], string>;

const FIGURE_ROWS = [
  ['requests', 'Requests', 'node'],
  ['errors', 'Errors', 'node'],
  ['bytes', 'Bytes', 'node'],
  ['transfers', 'Transfers in progress', 'node'],
  ['refusals', 'Refusals in the last hour', 'node'],
  ['sinceStart', 'Since this node started', 'node'],
  ['storage', 'Storage used', 'cluster'],
  ['bundles', 'Live bundles', 'cluster'],
  ['reports', 'Open reports', 'cluster'],
  ['sampled', 'Cluster figures as of', 'cluster'],
] as const;

const NONE = 'no sample yet';

/** The text of each figure, from this node's history and the cluster's samples of the last day. */
export function overviewFigures(node: NodeSummary | null, cluster: readonly ClusterSample[]): Figures {
  const latest = [...cluster].reverse().find((s) => s.storedBytes !== null);
  const at = latest?.at ?? 0;
  const growth = (seconds: number): string => {
    const from = cluster.find((s) => s.storedBytes !== null && s.at >= at - seconds);
    if (!latest || !from || from === latest) return 'n/a';
    return signedSize(latest.storedBytes! - from.storedBytes!);
  };
  const n = node;
  return {
    requests: n ? `${rate(n.perSecond.requests)} per second over the last minute` : NONE,
    errors: n ? `4xx ${rate(n.perSecond.clientErrors)}, 5xx ${rate(n.perSecond.serverErrors)} per second over the last minute` : NONE,
    bytes: n ? `${humanSize(Math.round(n.perSecond.bytesIn))}/s in, ${humanSize(Math.round(n.perSecond.bytesOut))}/s out over the last minute` : NONE,
    transfers: n ? `${n.uploads} ${n.uploads === 1 ? 'upload' : 'uploads'}, ${n.downloads} ${n.downloads === 1 ? 'download' : 'downloads'}` : NONE,
    refusals: n ? `${n.lastHour.rateLimited} answered 429, of which ${n.lastHour.contentRefused} by the content budgets` : NONE,
    sinceStart: n ? `${n.total.requests} requests, ${humanSize(n.total.bytesIn)} in, ${humanSize(n.total.bytesOut)} out since ${sqlUtc(new Date(n.since * 1000))} UTC` : NONE,
    storage: latest ? `${humanSize(latest.storedBytes!)} (${growth(3600)} in the last hour, ${growth(86_400)} in the last day)` : NONE,
    bundles: latest ? String(latest.liveBundles) : NONE,
    reports: latest ? String(latest.openReports) : NONE,
    sampled: latest ? `${sqlUtc(new Date(at * 1000))} UTC` : NONE,
  };
}

/** The overview: range switch, figures, charts. `clusterStep`: seconds between the cluster's samples. */
export function overviewBody(o: { range: Range; figures: Figures; history: boolean; clusterStep: number }): Safe {
  const rangeLink = (r: Range, label: string): Safe =>
    html`<a class="btn" href="/admin?range=${r}" data-range="${r}"${r === o.range ? html` aria-current="true"` : null}>${label}</a>`;
  const row = ([key, label]: readonly [keyof Figures, string, string]): Safe => html`<tr><th scope="row">${label}</th><td data-figure="${key}">${o.figures[key]}</td></tr>`;
  return html`<section class="card">
<h1>Overview</h1>
<p class="lead">Traffic is <strong>this node's since it started</strong>, kept in its memory${o.history ? null : html` (<strong>not kept on this node</strong>)`}; storage, bundles and reports are the <strong>whole cluster's</strong>, sampled every ${o.clusterStep === 60 ? 'minute' : `${o.clusterStep} seconds`} into the database by one node.</p>
<p class="actions range" role="group" aria-label="Range">${rangeLink('hour', 'Last hour')} ${rangeLink('day', 'Last day')}</p>
<table class="grid figures">
<tbody><tr><th scope="rowgroup" colspan="2">This node</th></tr>
${FIGURE_ROWS.filter((r) => r[2] === 'node').map(row)}</tbody>
<tbody><tr><th scope="rowgroup" colspan="2">Whole cluster</th></tr>
${FIGURE_ROWS.filter((r) => r[2] === 'cluster').map(row)}</tbody>
</table>
</section>
<section class="charts" id="overview-charts" data-range="${o.range}">
${CHARTS.map(
  (c) => html`<figure class="card chart" data-chart="${c.id}" data-source="${c.source}" data-series="${c.series.map((s) => s[0]).join(' ')}" data-labels="${c.series.map((s) => s[1]).join('|')}" data-format="${c.format}">
<figcaption><strong>${c.title}</strong> <span class="muted">${c.unit}</span></figcaption>
<div class="plot"></div>
</figure>`,
)}
</section>`;
}

/** Up to three significant digits: 0.0123, 1.5, 42, 1234. */
function rate(x: number): string {
  if (x === 0) return '0';
  return x >= 100 ? String(Math.round(x)) : String(Number(x.toPrecision(3)));
}

function signedSize(bytes: number): string {
  return bytes < 0 ? `−${humanSize(-bytes)}` : `+${humanSize(bytes)}`;
}
