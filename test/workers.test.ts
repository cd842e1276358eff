import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { Agent, request } from 'undici';
import { startServer, type TestServer } from './helpers/server.ts';
import { file, upload } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

/** A new TCP connection per request, so the kernel may hand each to a different worker. */
async function fresh(url: string, init: Parameters<typeof request>[1] = {}, localAddress?: string) {
  const agent = new Agent({ pipelining: 0, ...(localAddress && { localAddress }) });
  try {
    const res = await request(url, { ...init, dispatcher: agent });
    const body = await res.body.text();
    return { status: res.statusCode, headers: res.headers, body };
  } finally {
    await agent.close();
  }
}

/** Which worker answered /healthz: its X-Sluice-Worker header (the body is the bare {"success":true}). */
function workerOf(r: { body: string; headers: Record<string, string | string[] | undefined> }): number {
  assert.equal(r.body, '{"success":true}');
  return Number(r.headers['x-sluice-worker']);
}

const childPids = (pid: number): number[] =>
  execFileSync('ps', ['--ppid', String(pid), '-o', 'pid=,args='], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes('serve'))
    .map((l) => Number(l.trim().split(/\s+/)[0]));

const SELF = process.env.SLUICE_TEST_BACKENDS?.split(',').includes('postgres') ?? true;

// WORKERS > 1 needs real PostgreSQL and Redis; the embedded defaults refuse it (config tests).
describe('WORKERS=2 (postgres + redis)', { skip: !SELF && 'postgres backend not selected' }, () => {
  let s: TestServer;
  before(async () => {
    s = await startServer('postgres', { WORKERS: '2', RATE_LIMIT_ANON_PER_HOUR: '40' });
  });
  after(() => s?.close());

  test('two worker processes answer on one port', async () => {
    assert.equal(childPids(s.proc.pid!).length, 2);
    const seen = new Set<number>();
    for (let i = 0; i < 40 && seen.size < 2; i++) {
      const r = await fresh(`${s.url}/healthz`);
      assert.equal(r.status, 200);
      seen.add(workerOf(r));
    }
    assert.deepEqual([...seen].sort(), [0, 1]);
  });

  test('the rate limit is one budget across the workers', async () => {
    // Fresh connections spread over both workers; the budget lives in Redis. A source address of
    // its own gives this test a full budget.
    const statuses: number[] = [];
    for (let i = 0; i < 50; i++) statuses.push((await fresh(`${s.url}/api/v1/bundle/zzzzz`, {}, '127.0.0.3')).status);
    const admitted = statuses.filter((c) => c !== 429).length;
    assert.equal(admitted, 40, JSON.stringify(statuses));
  });

  test('an upload on one worker is served by the other', async () => {
    const up = await upload(s, [file('w.txt', 'shared across workers')]);
    assert.equal(up.status, 201, JSON.stringify(up.json));
    const id = (up.json as unknown as { files: Array<{ id: number }> }).files[0]!.id;
    for (let i = 0; i < 6; i++) {
      const r = await fresh(`${s.url}/d/${id}`);
      assert.equal(r.status, 200);
      assert.equal(r.body, 'shared across workers');
    }
  });

  const healthzCount = (text: string): number =>
    Number(/^sluice_http_requests_total\{route="\/healthz",method="get",status="200"\} (\d+)/m.exec(text)?.[1] ?? 0);

  test('/metrics adds up every worker', async () => {
    const before = await fresh(`${s.url}/metrics`);
    const count = healthzCount;
    const n0 = count(before.body);
    for (let i = 0; i < 10; i++) await fresh(`${s.url}/healthz`);
    const after1 = await fresh(`${s.url}/metrics`);
    assert.equal(count(after1.body), n0 + 10);
  });

  test('a killed worker is replaced and the server keeps serving', async () => {
    // Each worker answers /healthz a few times, then a scrape sees both parts.
    const answered = [0, 0];
    for (let i = 0; i < 200 && Math.min(...answered) < 3; i++) {
      answered[workerOf(await fresh(`${s.url}/healthz`))]!++;
    }
    assert.ok(Math.min(...answered) >= 3, JSON.stringify(answered));
    const counted = healthzCount((await fresh(`${s.url}/metrics`)).body);
    const [victim] = childPids(s.proc.pid!);
    process.kill(victim!, 'SIGKILL');
    // Connections the dead worker had accepted or queued are lost with it; the survivor serves.
    const deadline = Date.now() + 10_000;
    let pids: number[] = [];
    await waitFor('a replacement worker', () => {
      pids = childPids(s.proc.pid!);
      return pids.length === 2 && !pids.includes(victim!);
    }, 10_000);
    assert.equal(pids.length, 2);
    assert.ok(!pids.includes(victim!));
    // The replacement takes connections once it listens.
    const seen = new Set<number>();
    let asked = 0;
    while (seen.size < 2 && Date.now() < deadline + 10_000) {
      const r = await fresh(`${s.url}/healthz`);
      asked++;
      assert.equal(r.status, 200);
      seen.add(workerOf(r));
    }
    assert.equal(seen.size, 2);
    // The dead worker's counts, as last scraped, stay in the sum: a counter never drops (Prometheus
    // would read a drop as a reset of the whole series).
    const after = (await fresh(`${s.url}/metrics`)).body;
    assert.ok(healthzCount(after) >= counted + asked, `${healthzCount(after)} < ${counted} + ${asked}`);
    assert.match(after, /^sluice_http_request_duration_seconds_count\{route="\/healthz"\} \d+/m);
  });

  test('SIGTERM stops every worker and the supervisor exits 0', async () => {
    const pids = childPids(s.proc.pid!);
    const exited = new Promise<number | null>((r) => s.proc.once('exit', (code) => r(code)));
    s.proc.kill('SIGTERM');
    assert.equal(await exited, 0);
    for (const pid of pids) assert.throws(() => process.kill(pid, 0));
  });
});
