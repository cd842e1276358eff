// The issue's targets, read back from the JSON results one `npm run bench` wrote, each marked met or missed.
// An upload miss says whether the run's durable bound (bench/upload.ts) could have met it at all.
import { readFileSync } from 'node:fs';
import { formatSize, printTable, type Cell } from './report.ts';

interface Row {
  server?: string;
  mode?: string;
  kind?: string;
  size?: number;
  streams?: number;
  mbps?: number;
  rps?: number;
  wrkRps?: number;
  peakRssMiB?: number;
}
type Results = Partial<Record<string, Row[]>>;

/** The newest result file of each scenario, by name (upload, download, requests, zip, tus). */
export function loadResults(files: readonly string[]): Results {
  const out: Results = {};
  for (const file of [...files].sort()) {
    const data = JSON.parse(readFileSync(file, 'utf8')) as { scenario?: string; results?: Row[] };
    if (data.scenario && Array.isArray(data.results)) out[data.scenario] = data.results;
  }
  return out;
}

const UPLOAD_VS_MULTER = 1.5;
const UPLOAD_VS_NGINX = 0.8;
const DOWNLOAD_VS_NGINX = 0.6;
const REQUESTS_VS_NODE = 2;
const RSS_MIB = 128;

const x = (n: number): string => `${n.toFixed(2)}x`;
const streamsLabel = (r: Row): string => `${formatSize(r.size ?? 0)} ${r.streams === 1 ? 'single' : `x ${r.streams}`}`;

/** One line per target and case: [target, case, measured, verdict]. */
export function targetRows(res: Results): Cell[][] {
  const rows: Cell[][] = [];
  const upload = res.upload ?? [];
  const same = (a: Row, b: Row): boolean => a.size === b.size && a.streams === b.streams;
  const peer = (scenario: Row[], server: string, c: Row): number | undefined =>
    scenario.find((r) => r.server === server && same(r, c))?.mbps;
  for (const [server, goal, label] of [
    ['express-multer', UPLOAD_VS_MULTER, 'upload vs express+multer'],
    ['nginx', UPLOAD_VS_NGINX, 'upload vs nginx (to a file)'],
  ] as const) {
    for (const c of upload.filter((r) => r.server === 'sluice')) {
      const base = peer(upload, server, c);
      if (base === undefined || c.mbps === undefined) continue;
      const got = c.mbps / base;
      const bound = peer(upload, 'durable bound', c);
      let verdict = got >= goal ? 'met' : 'missed';
      if (got < goal && bound !== undefined) {
        verdict += bound / base < goal ? `; beyond any durable server here (bound ${x(bound / base)})` : `; bound ${x(bound / base)}`;
      }
      rows.push([`${label} >= ${goal}x`, streamsLabel(c), x(got), verdict]);
    }
  }
  const download = res.download ?? [];
  for (const c of download.filter((r) => r.server === 'sluice' && r.streams === 1)) {
    const base = peer(download, 'nginx', c);
    if (base === undefined || c.mbps === undefined) continue;
    const got = c.mbps / base;
    rows.push([`download vs nginx sendfile >= ${DOWNLOAD_VS_NGINX}x`, streamsLabel(c), x(got), got >= DOWNLOAD_VS_NGINX ? 'met' : 'missed']);
  }
  const requests = res.requests ?? [];
  for (const c of requests.filter((r) => r.server === 'sluice')) {
    const base = requests.find((r) => r.server === 'node-pg' && r.kind === c.kind);
    if (!base?.rps || c.rps === undefined) continue;
    const got = c.rps / base.rps;
    const wrk = c.wrkRps !== undefined && base.wrkRps ? `; wrk ${x(c.wrkRps / base.wrkRps)}` : '';
    rows.push([`small requests vs node:http+pg >= ${REQUESTS_VS_NODE}x`, c.kind ?? '', x(got), (got >= REQUESTS_VS_NODE ? 'met' : 'missed') + wrk]);
  }
  const big = [
    ...upload.filter((r) => r.server === 'sluice').map((r) => ['upload', r] as const),
    ...download.filter((r) => r.server === 'sluice').map((r) => ['download', r] as const),
    ...(res.tus ?? []).map((r) => [r.mode ?? 'tus', r] as const),
  ].filter(([, r]) => (r.size ?? 0) >= 4 * 1024 ** 3 && r.peakRssMiB !== undefined);
  for (const [what, r] of big) {
    const label = r.streams === undefined ? `${what} ${formatSize(r.size!)}` : `${what} ${streamsLabel(r)}`;
    rows.push([`peak RSS in a 4 GiB transfer < ${RSS_MIB} MiB`, label, `${r.peakRssMiB!.toFixed(0)} MiB`, r.peakRssMiB! < RSS_MIB ? 'met' : 'missed']);
  }
  return rows;
}

export function printTargets(res: Results): void {
  const rows = targetRows(res);
  if (rows.length === 0) return;
  console.log('\n=== the targets (issue #7), from this run ===');
  console.log('small requests: autocannon as the issue names it, wrk beside it; "bound": see the upload scenario\'s durable bound row');
  printTable(['target', 'case', 'measured', 'verdict'], rows);
}

/** What a bench case reports: its rounds, its errors, and the figures summarised from them. */
export interface Measured<R> {
  runs: R[];
  errors: string[];
  mbps?: number;
  wallMs?: number;
  peakRssMiB?: number;
  cpuPerGB?: number;
}
