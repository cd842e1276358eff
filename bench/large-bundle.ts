// Event-loop responsiveness with a 10,000-file bundle: FLOOD connections (half on the share page,
// half on the zip) request it back to back for SECONDS while one client times GET /healthz every
// 50 ms. Reports the /healthz latency (p50, p99, max) and how many pages and zips were served.
//   node --import tsx bench/large-bundle.ts     env: BENCH_FILES (10000) BENCH_FLOOD (16) BENCH_SECONDS (10)
//   DATABASE_URL=postgres://… for the PostgreSQL backend (a fresh database is made)
import http from 'node:http';
import { closeAll, freshDatabase, startSluice } from './lib/targets.ts';
import { uploadMultipart } from './lib/http-client.ts';
import { envInt } from './lib/report.ts';

const FILES = envInt('BENCH_FILES', 10_000);
const FLOOD = envInt('BENCH_FLOOD', 16);
const SECONDS = envInt('BENCH_SECONDS', 10);
const PER_REQUEST = 1000; // the multipart file limit of one request

const agent = new http.Agent({ keepAlive: true, maxSockets: FLOOD + 2 });

/** One GET read to its end; resolves with status and milliseconds. */
function get(url: string): Promise<{ status: number; ms: number }> {
  const t = performance.now();
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        res.on('data', () => {});
        res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};

async function main(): Promise<void> {
  const databaseUrl = process.env.DATABASE_URL ? await freshDatabase(process.env.DATABASE_URL) : undefined;
  // The flood is one client address: with the content budget's default it would measure 429 answers.
  process.env.RATE_LIMIT_CONTENT_PER_MINUTE ??= '1000000000';
  const target = await startSluice({ databaseUrl });
  try {
    let code = '';
    let token = '';
    const made = performance.now();
    for (let i = 0; i < FILES; i += PER_REQUEST) {
      const files = Array.from({ length: Math.min(PER_REQUEST, FILES - i) }, (_, j) => ({ name: `f${i + j}.txt`, size: 16 }));
      const url = token ? `${target.baseUrl}/api/v1/upload/${token}` : `${target.baseUrl}/api/v1/upload`;
      const r = await uploadMultipart(url, files);
      const json = r.json as { short_code?: string; upload_token?: string } | undefined;
      if (r.status >= 300 || !json) throw new Error(`upload: ${r.status} ${r.body.slice(0, 300)}`);
      code ||= json.short_code ?? '';
      token ||= json.upload_token ?? '';
    }
    console.log(`large bundle: ${FILES} files in ${((performance.now() - made) / 1000).toFixed(1)} s (${databaseUrl ? 'PostgreSQL' : 'embedded'})`);
    const page = await get(`${target.baseUrl}/${code}`);
    const zip = await get(`${target.baseUrl}/zip/${code}`);
    console.log(`one share page: ${page.status} in ${page.ms.toFixed(0)} ms; one zip: ${zip.status} in ${zip.ms.toFixed(0)} ms`);

    const until = Date.now() + SECONDS * 1000;
    const served = { page: 0, zip: 0, other: 0 };
    const flood = Array.from({ length: FLOOD }, async (_, i) => {
      const kind = i % 2 ? 'zip' : 'page';
      const url = kind === 'zip' ? `${target.baseUrl}/zip/${code}` : `${target.baseUrl}/${code}`;
      while (Date.now() < until) {
        const r = await get(url);
        if (r.status === 200) served[kind]++;
        else served.other++;
      }
    });
    const health: number[] = [];
    const settled: number[] = []; // probes from the second second on, once the flood's connections are up
    const opening: number[] = []; // probes of the first second
    const started = Date.now();
    let worstAt = 0;
    const probe = (async () => {
      while (Date.now() < until) {
        const t = Date.now() - started;
        const { ms } = await get(`${target.baseUrl}/healthz`);
        if (ms > Math.max(0, ...health)) worstAt = t;
        health.push(ms);
        (t >= 1000 ? settled : opening).push(ms);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    await Promise.all([...flood, probe]);
    console.log(
      `flood of ${FLOOD} for ${SECONDS} s: ${served.page} pages, ${served.zip} zips, ${served.other} other answers; ` +
        `/healthz p50 ${pct(health, 50).toFixed(1)} ms, p99 ${pct(health, 99).toFixed(1)} ms, max ${Math.max(...health).toFixed(1)} ms at ${(worstAt / 1000).toFixed(1)} s, max in the first second ${Math.max(...opening).toFixed(1)} ms, after it ${Math.max(...settled).toFixed(1)} ms (${health.length} probes)`,
    );
  } finally {
    agent.destroy();
    await target.close();
    await closeAll();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
