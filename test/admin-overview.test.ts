// The console's overview: the in-memory history's rings (rates, the day's minutes, bounds, resets),
// the reading of the metrics it keeps, and /admin with /admin/overview.json against a real server
// sampling every second (CONSOLE_SAMPLE_SECONDS=1, the cluster's figures every 6 s).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { waitFor } from './helpers/wait.ts';
import { filePart, multipart } from './helpers/multipart.ts';
import { createHistory, NODE_SERIES, readTraffic, type Reading } from '../src/metrics/history.ts';
import { createMetrics } from '../src/metrics/metrics.ts';
import { takeClusterSample } from '../src/db/console-samples.ts';
import type { Sql } from '../src/db/sql.ts';

const zero: Reading = Object.fromEntries(NODE_SERIES.map((k) => [k, 0])) as Reading;
const T0 = 1_800_000_000_000; // ms, on a minute boundary

describe('the history of a node', () => {
  test('counters become per-second rates, gauges stay as read; nothing before the baseline counts', () => {
    const h = createHistory(10);
    h.record(T0, { ...zero, requests: 1000, bytesIn: 5000 });
    assert.equal(h.summary(), null, 'a baseline alone says nothing');
    h.record(T0 + 10_000, { ...zero, requests: 1050, serverErrors: 5, bytesIn: 25_000, uploads: 3 });
    h.record(T0 + 20_000, { ...zero, requests: 1060, serverErrors: 5, bytesIn: 25_000, uploads: 1 });
    const s = h.series('hour');
    assert.equal(s.step, 10);
    assert.deepEqual(s.t, [T0 / 1000 + 10, T0 / 1000 + 20]);
    assert.deepEqual(s.values.requests, [5, 1]);
    assert.deepEqual(s.values.serverErrors, [0.5, 0]);
    assert.deepEqual(s.values.bytesIn, [2000, 0]);
    assert.deepEqual(s.values.uploads, [3, 1]);
    const sum = h.summary()!;
    assert.equal(sum.total.requests, 60);
    assert.equal(sum.perSecond.requests, 3);
    assert.equal(sum.lastHour.serverErrors, 5);
    assert.equal(sum.uploads, 1);
  });

  test('a counter that goes down (a worker replaced) counts nothing for that interval', () => {
    const h = createHistory(10);
    h.record(T0, { ...zero, requests: 100 });
    h.record(T0 + 10_000, { ...zero, requests: 40 });
    h.record(T0 + 20_000, { ...zero, requests: 60 });
    assert.deepEqual(h.series('hour').values.requests, [0, 2]);
    assert.equal(h.summary()!.total.requests, 20);
  });

  test('the hour keeps its last hour only, the day one point a minute (counters averaged, gauges at their highest)', () => {
    const h = createHistory(10);
    // Three hours, 6 requests a sample (0.6/s), 60 in the six samples of minute 100 (6/s); uploads peak at 9 once a minute.
    for (let i = 0; i <= 3 * 360; i++) {
      const requests = i * 6 + (i >= 600 ? Math.min(i - 599, 6) * 54 : 0);
      h.record(T0 + i * 10_000, { ...zero, requests, uploads: i % 6 === 3 ? 9 : 1 });
    }
    const hour = h.series('hour');
    const last = T0 / 1000 + 3 * 3600;
    assert.equal(hour.t.length, 360);
    assert.ok(hour.t.every((t) => t > last - 3600 && t <= last));
    assert.ok(hour.values.requests.every((r) => r === 0.6));
    const day = h.series('day');
    assert.equal(day.step, 60);
    // 180 finished minutes, and the one just begun.
    assert.equal(day.t.length, 181);
    assert.ok(day.t.slice(0, -1).every((t) => t % 60 === 0));
    assert.equal(day.values.requests[100], 6, 'minute 100: its six samples of 60 requests');
    assert.equal(day.values.requests[99], 0.6);
    assert.equal(day.values.requests[101], 0.6);
    assert.ok(day.values.uploads.slice(0, -1).every((u) => u === 9), 'each minute shows its highest');
  });

  test('the rings do not grow: a day of samples every second fits in their fixed slots', () => {
    const h = createHistory(1);
    for (let i = 0; i <= 2 * 86_400; i += 1) h.record(T0 + i * 1000, { ...zero, requests: i });
    assert.equal(h.series('hour').t.length, 3600);
    assert.equal(h.series('day').t.length, 1440 + 1);
  });

  test('readTraffic sums what a scrape shows: requests by status class, bytes, 429s, content refusals, transfers', async () => {
    const m = createMetrics();
    const rec = m.forRoute('/api/v1/upload', 'post');
    rec(200, 0.01, 100, 20);
    rec(404, 0.01, 0, 5);
    rec(429, 0.01, 0, 5);
    rec(503, 0.01, 7, 0);
    m.contentRefused('misses');
    m.transfer('upload', 1);
    m.transfer('upload', 1);
    m.transfer('download', 1);
    const r = await readTraffic(m);
    assert.deepEqual(r, { requests: 4, clientErrors: 2, serverErrors: 1, bytesIn: 107, bytesOut: 30, rateLimited: 1, contentRefused: 1, uploads: 2, downloads: 1 });
  });
});

async function get(srv: TestServer, path: string, cookie?: string): Promise<{ status: number; body: string; type: string }> {
  const res = await request(`${srv.url}${path}`, { headers: cookie ? { cookie } : {} });
  return { status: res.statusCode, body: await res.body.text(), type: String(res.headers['content-type']) };
}

interface Overview {
  range: string;
  node: { since: number; step: number; t: number[]; requests: number[]; clientErrors: number[]; bytesIn: number[] } | null;
  cluster: { step: number; t: number[]; liveBundles: Array<number | null>; storedBytes: Array<number | null> };
  figures: Record<string, string>;
}

for (const backend of backends()) {
  describe(`console overview (${backend})`, () => {
    let srv: TestServer;
    let cookie = '';
    const overview = async (range = 'hour'): Promise<Overview> => {
      const r = await get(srv, `/admin/overview.json?range=${range}`, cookie);
      assert.equal(r.status, 200, r.body);
      assert.match(r.type, /^application\/json/);
      return JSON.parse(r.body) as Overview;
    };
    before(async () => {
      srv = await startServer(backend, { CONSOLE_SAMPLE_SECONDS: '1' });
      const link = await srv.cli(['admin', 'link', '--label', 'overview test']);
      assert.equal(link.code, 0, link.stderr);
      const res = await request(`${srv.url}${new URL(link.stdout.trim()).pathname}`, { method: 'POST' });
      await res.body.dump();
      cookie = /^(sluice_admin=[^;]+)/.exec(String(res.headers['set-cookie']))![1]!;
    });
    after(async () => {
      await srv?.close();
    });

    test('without a session /admin and /admin/overview.json are the site 404 page', async () => {
      const notFound = (await get(srv, '/zzzzz')).body;
      for (const path of ['/admin', '/admin?range=day', '/admin/overview.json', '/admin/overview.json?range=day']) {
        const r = await get(srv, path);
        assert.equal(r.status, 404, path);
        assert.equal(r.body, notFound, path);
        assert.equal((await get(srv, path, 'sluice_admin=1.forged.cookie')).status, 404, path);
      }
    });

    test('the page has the figures as text and a container per chart; uPlot comes from our own origin', async () => {
      const page = await get(srv, '/admin', cookie);
      assert.equal(page.status, 200);
      for (const id of ['requests', 'bytes', 'transfers', 'refusals', 'storage', 'growth', 'bundles', 'reports']) {
        assert.match(page.body, new RegExp(`<figure class="card chart" data-chart="${id}"`), id);
      }
      assert.match(page.body, /<td data-figure="bundles">/);
      assert.match(page.body, /this node's since it started/);
      const script = /<script src="(\/static\/uplot\.js\?v=\w+)" defer>/.exec(page.body)?.[1];
      const style = /<link rel="stylesheet" href="(\/static\/uplot\.css\?v=\w+)">/.exec(page.body)?.[1];
      const own = /<script src="(\/static\/admin-overview\.js\?v=\w+)" defer>/.exec(page.body)?.[1];
      for (const [url, type] of [[script, 'text/javascript'], [style, 'text/css'], [own, 'text/javascript']] as const) {
        assert.ok(url, page.body);
        const r = await get(srv, url);
        assert.equal(r.status, 200, url);
        assert.match(r.type, new RegExp(`^${type}`), url);
      }
      assert.match((await get(srv, '/admin?range=day', cookie)).body, /href="\/admin\?range=day" data-range="day" aria-current="true"/);
    });

    test('the series rise with uploads and misses; the cluster figures follow within their step', async () => {
      const before = await overview();
      const from = before.node!.t.at(-1) ?? 0;
      const size = 40_000;
      for (let i = 0; i < 5; i++) {
        const { body, contentType } = multipart([filePart(`f${i}.bin`, Buffer.alloc(size, i))]);
        const res = await request(`${srv.url}/api/v1/upload`, { method: 'POST', body, headers: { 'content-type': contentType } });
        assert.equal(res.statusCode, 201, await res.body.text());
      }
      for (let i = 0; i < 3; i++) assert.equal((await get(srv, '/api/v1/bundle/zzzzz')).status, 404);
      // Each point is a rate over about one second: their sum is the count, within the rounding of the intervals.
      const after = await waitFor('the uploads in the request series', async () => {
        const o = await overview();
        const since = (k: 'requests' | 'clientErrors' | 'bytesIn') => o.node![k].filter((_, i) => o.node!.t[i]! > from).reduce((a, b) => a + b, 0);
        return since('requests') >= 8 * 0.9 && since('clientErrors') >= 3 * 0.9 && since('bytesIn') >= 5 * size * 0.9 ? o : null;
      });
      assert.equal(after.node!.step, 1);
      assert.match(after.figures.sinceStart!, /^\d+ requests, /);
      const cluster = await waitFor('the bundles in the cluster figures', async () => {
        const o = await overview();
        return (o.cluster.liveBundles.at(-1) ?? 0) >= 5 ? o : null;
      });
      assert.ok(cluster.cluster.storedBytes.at(-1)! >= 5 * size);
      assert.equal(cluster.cluster.step, 6);
      assert.match(cluster.figures.bundles!, /^\d+$/);
      const day = await overview('day');
      assert.equal(day.range, 'day');
      assert.equal(day.node!.step, 60);
      assert.ok(day.node!.requests.at(-1)! > 0, 'the day ends with the minute in progress');
    });

    test('one node takes a step’s cluster sample: a second claim of the same step does nothing', async () => {
      const sql = srv.sql as unknown as Sql;
      // A step of its own length (the server's is 6 s): at most one of two racing claims, or the server, takes it.
      const taken = await Promise.all([takeClusterSample(sql, 601), takeClusterSample(sql, 601)]);
      assert.ok(taken.filter(Boolean).length <= 1, String(taken));
      const [row] = await srv.sql<{ n: string }[]>`
        select count(*) as n from console_samples where at = to_timestamp(floor(extract(epoch from now()) / 601) * 601) and live_bundles is not null`;
      assert.equal(Number(row!.n), 1);
    });
  });
}
