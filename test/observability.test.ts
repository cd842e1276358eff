import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { request, type Agent } from 'undici';
import { backends, startServer, ROOT, type TestServer } from './helpers/server.ts';
import { waitFor } from './helpers/wait.ts';
import { created, rawConnect, rawHead, partHead, newBoundary, write } from './upload-util.ts';
import { file, upload } from './helpers/http.ts';
import { randomLoopback, from } from './access-util.ts';
import { createLogger } from '../src/log.ts';

interface Got { status: number; headers: Record<string, string | string[] | undefined>; text: string }
async function get(url: string, o: { agent?: Agent; headers?: Record<string, string> } = {}): Promise<Got> {
  const r = await request(url, { dispatcher: o.agent, headers: o.headers });
  return { status: r.statusCode, headers: r.headers, text: await r.body.text() };
}

interface Sample { name: string; labels: Record<string, string>; value: number }
/**
 * A strict reader of the Prometheus text exposition format (0.0.4): HELP and TYPE at most once per
 * family and before its samples, known types only, well-formed names, labels and values; every
 * sample belongs to a declared family (histograms: _bucket/_sum/_count).
 */
function parseProm(text: string): { types: Map<string, string>; samples: Sample[] } {
  const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const types = new Map<string, string>();
  const helps = new Set<string>();
  const seen = new Set<string>();
  const samples: Sample[] = [];
  assert.ok(text.endsWith('\n'), 'exposition ends with a newline');
  const lines = text.slice(0, -1).split('\n');
  for (const [i, line] of lines.entries()) {
    const where = `line ${i + 1}: ${line}`;
    if (line === '') continue;
    const meta = new RegExp(`^# (HELP|TYPE) (${NAME}) (.*)$`).exec(line);
    if (meta) {
      const [, kind, name, rest] = meta as unknown as [string, string, string, string];
      assert.ok(!seen.has(name), `${kind} after samples of ${name}: ${where}`);
      if (kind === 'HELP') {
        assert.ok(!helps.has(name), `second HELP: ${where}`);
        assert.match(rest, /^([^\\]|\\\\|\\n)*$/, where);
        helps.add(name);
      } else {
        assert.ok(!types.has(name), `second TYPE: ${where}`);
        assert.match(rest, /^(counter|gauge|histogram|summary|untyped)$/, where);
        types.set(name, rest);
      }
      continue;
    }
    assert.ok(!line.startsWith('#') || line.startsWith('# '), where);
    if (line.startsWith('#')) continue;
    const m = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (\\S+)(?: (-?\\d+))?$`).exec(line);
    assert.ok(m, `malformed sample: ${where}`);
    const [, name, rawLabels, rawValue] = m as unknown as [string, string, string | undefined, string];
    // Values are what Go's ParseFloat reads: NaN and Inf in any case (prom-client writes `Nan`).
    assert.match(rawValue, /^(?:[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|[+-]?(?:inf|infinity)|nan)$/i, where);
    const labels: Record<string, string> = {};
    if (rawLabels !== undefined && rawLabels !== '') {
      const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"(,|$)/y;
      let pos = 0;
      while (pos < rawLabels.length) {
        LABEL.lastIndex = pos;
        const l = LABEL.exec(rawLabels);
        assert.ok(l, `malformed labels: ${where}`);
        assert.ok(!(l[1]! in labels), `duplicate label: ${where}`);
        labels[l[1]!] = l[2]!.replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c));
        pos = LABEL.lastIndex;
      }
    }
    const family = types.has(name) ? name : name.replace(/_(bucket|sum|count)$/, '');
    const type = types.get(family);
    assert.ok(type, `sample without TYPE: ${where}`);
    if (family !== name) assert.ok(type === 'histogram' || type === 'summary', `suffix on a ${type}: ${where}`);
    if (name.endsWith('_bucket')) assert.ok('le' in labels, where);
    seen.add(family);
    samples.push({ name, labels, value: /inf/i.test(rawValue) ? (rawValue.startsWith('-') ? -Infinity : Infinity) : Number(rawValue) });
  }
  return { types, samples };
}

const requestsFor = (samples: Sample[], route: string, status: string): number =>
  samples
    .filter((s) => s.name === 'sluice_http_requests_total' && s.labels.route === route && s.labels.status === status)
    .reduce((n, s) => n + s.value, 0);

for (const backend of backends()) {
  describe(`observability (${backend})`, () => {
    let srv: TestServer;
    let base: string;
    before(async () => {
      // A small budget, so a 429 is cheap; every test uses its own source address.
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: '5', HOST: '0.0.0.0', ANON_MAX_BUNDLE_BYTES: '4096' });
      base = `http://127.0.0.1:${srv.port}`;
    });
    after(() => srv.close());

    test('every response carries a unique X-Request-Id; a valid incoming one is echoed, an invalid one replaced', async () => {
      const agent = from(randomLoopback());
      const ok1 = await get(`${base}/healthz`, { agent });
      const ok2 = await get(`${base}/healthz`, { agent });
      const err = await get(`${base}/api/v1/bundle/!!`, { agent });
      assert.equal(ok1.status, 200);
      assert.equal(err.status, 400);
      const reply = await created(srv, [file('a.txt', 'hello')]);
      const dl = await get(`${base}${reply.files[0]!.download_url}`, { agent });
      assert.equal(dl.status, 200);
      assert.equal(dl.text, 'hello');
      const ids = [ok1, ok2, err, dl].map((r) => r.headers['x-request-id']);
      for (const id of ids) assert.match(String(id), /^[A-Za-z0-9._-]{1,64}$/);
      assert.equal(new Set(ids).size, ids.length, `ids are unique: ${ids.join(' ')}`);

      const mine = 'trace-01.AB_cd';
      assert.equal((await get(`${base}/healthz`, { headers: { 'x-request-id': mine } })).headers['x-request-id'], mine);
      for (const bad of ['has space', 'x'.repeat(65), 'semi;colon', '']) {
        const got = String((await get(`${base}/healthz`, { headers: { 'x-request-id': bad } })).headers['x-request-id']);
        assert.notEqual(got, bad);
        assert.match(got, /^[A-Za-z0-9._-]{1,64}$/);
      }
    });

    test('/metrics is valid exposition text; requests are counted by route pattern and status, 429s included', async () => {
      const scrape = async (): Promise<Sample[]> => {
        const r = await get(`${base}/metrics`);
        assert.equal(r.status, 200);
        assert.match(String(r.headers['content-type']), /^text\/plain; version=0\.0\.4/);
        const { types, samples } = parseProm(r.text);
        assert.equal(types.get('sluice_http_requests_total'), 'counter');
        assert.equal(types.get('sluice_http_request_duration_seconds'), 'histogram');
        assert.equal(types.get('sluice_http_active_requests'), 'gauge');
        assert.equal(types.get('process_cpu_seconds_total'), 'counter');
        return samples;
      };
      const route = '/api/v1/bundle/:code';
      const before = await scrape();
      const agent = from(randomLoopback());
      for (let i = 0; i < 5; i++) assert.equal((await get(`${base}/api/v1/bundle/abcde`, { agent })).status, 404);
      assert.equal((await get(`${base}/api/v1/bundle/abcde`, { agent })).status, 429);
      const after = await scrape();
      assert.equal(requestsFor(after, route, '404') - requestsFor(before, route, '404'), 5);
      assert.equal(requestsFor(after, route, '429') - requestsFor(before, route, '429'), 1);
      const count = (s: Sample[]): number =>
        s.find((x) => x.name === 'sluice_http_request_duration_seconds_count' && x.labels.route === route)?.value ?? 0;
      assert.equal(count(after) - count(before), 6);
      // The scrape in progress is the one active request.
      assert.equal(after.find((s) => s.name === 'sluice_http_active_requests')?.value, 1);
      assert.ok((after.find((s) => s.name === 'sluice_http_bytes_out_total')?.value ?? 0) > 0);
    });

    test('/readyz answers 200 with the database and Redis state and what runs; /healthz is the bare {"success":true}', async () => {
      const r = await get(`${base}/readyz`);
      assert.equal(r.status, 200, r.text);
      const { uws, fast_paths, ...rest } = JSON.parse(r.text) as { uws: { package: string; version: string; limits: unknown[] }; fast_paths: unknown };
      assert.deepEqual(fast_paths, { multipart_search: true, straight_to_file: true });
      assert.deepEqual(rest, { success: true, db: 'ok', redis: srv.env.REDIS_URL ? 'ok' : 'absent', database: srv.env.DATABASE_URL ? 'postgres' : 'embedded' });
      assert.match(uws.package, /uws|uwebsockets/i);
      assert.match(uws.version, /^\d+\.\d+\.\d+/, 'the package version as installed');
      assert.ok(Array.isArray(uws.limits));
      assert.ok(r.headers['x-request-id']);
      const h = await get(`${base}/healthz`);
      assert.equal(h.status, 200);
      assert.equal(h.text, '{"success":true}');
      assert.equal(h.headers['x-sluice-worker'], undefined, 'one process: no worker header');
    });

    test('uploads over the cap and abandoned uploads are counted', async () => {
      const value = async (name: string): Promise<number> =>
        parseProm((await get(`${base}/metrics`)).text).samples.find((s) => s.name === name)?.value ?? NaN;
      const [caps, aborts] = [await value('sluice_upload_cap_rejections_total'), await value('sluice_upload_aborts_total')];
      const over = await upload(srv, [file('big.bin', Buffer.alloc(5000))]);
      assert.equal(over.status, 400);
      assert.equal(await value('sluice_upload_cap_rejections_total'), caps + 1);

      const conn = await rawConnect(srv.port);
      const boundary = newBoundary();
      await write(conn.sock, rawHead('/api/v1/upload', boundary, 3000, ''));
      await write(conn.sock, Buffer.concat([partHead(boundary, 'gone.bin'), Buffer.alloc(1000)]));
      const uploading = async (): Promise<boolean> =>
        parseProm((await get(`${base}/metrics`)).text).samples.some((s) => s.name === 'sluice_active_transfers' && s.labels.kind === 'upload' && s.value === 1);
      await waitFor('the upload in progress', uploading);
      conn.sock.destroy();
      await waitFor('the abort counted', async () => (await value('sluice_upload_aborts_total')) !== aborts);
      assert.equal(await value('sluice_upload_aborts_total'), aborts + 1);
      assert.equal(await value('sluice_upload_cap_rejections_total'), caps + 1);
    });

    test('SIGHUP is logged as a no-op and the server keeps serving', async () => {
      let log = '';
      const listen = (c: Buffer | string): void => void (log += String(c));
      srv.proc.stderr!.on('data', listen);
      try {
        srv.proc.kill('SIGHUP');
        await waitFor('the SIGHUP log line', () => log.includes('SIGHUP: nothing to reload'));
        assert.match(log, /SIGHUP: nothing to reload; restart to apply configuration/);
        assert.equal((await get(`${base}/healthz`)).status, 200);
      } finally {
        srv.proc.stderr!.off('data', listen);
      }
    });
  });
}

test('the logger censors credentials that reach it', async () => {
  let out = '';
  const sink = new Writable({ write: (c: Buffer, _e, cb) => ((out += c.toString()), cb()) });
  const log = createLogger('info', sink as unknown as Parameters<typeof createLogger>[1]);
  const secrets = ['Bearer sk_secret1', 'ut_secret2', 'at_secret3', 'pw_secret4', 'q_secret5', 'q_secret6'];
  log.info(
    {
      headers: { authorization: secrets[0], 'x-upload-token': secrets[1], 'x-access-token': secrets[2] },
      password: secrets[3],
      req: { query: { t: secrets[4], upload_token: secrets[5] }, url: `/x?t=${secrets[4]}` },
      reqId: 'kept',
    },
    'm',
  );
  log.info({ access_password: secrets[3], url: `/u?upload_token=${secrets[5]}` }, 'n');
  await new Promise((r) => setImmediate(r));
  for (const s of secrets) assert.ok(!out.includes(s), `${s} leaked: ${out}`);
  assert.match(out, /"reqId":"kept"/);
});

test('npm start, the systemd unit and the launcher give node the same flags', () => {
  const shebang = fs.readFileSync(path.join(ROOT, 'bin/sluice.js'), 'utf8').split('\n')[0]!;
  const flags = shebang.replace('#!/usr/bin/env -S node', '').trim();
  assert.match(flags, /^--max-semi-space-size=\d+$/);
  const start = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts.start as string;
  assert.ok(start.includes(`node ${flags} bin/sluice.js serve`), start);
  const unit = fs.readFileSync(path.join(ROOT, 'systemd/sluice.service'), 'utf8');
  assert.match(unit, new RegExp(`^ExecStart=/usr/bin/node ${flags} /opt/sluice/bin/sluice\\.js serve$`, 'm'));
});

test('systemd-analyze verify accepts the unit', { skip: spawnSync('systemd-analyze', ['--version']).error ? 'no systemd-analyze' : false }, () => {
  const unit = path.join(ROOT, 'systemd/sluice.service');
  // Complaints about paths that exist only on a deployed host are all the real unit may produce.
  const real = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8' });
  const other = `${real.stdout}${real.stderr}`.split('\n').filter((l) => l.trim() && !/\/opt\/sluice|\/etc\/sluice|No such file|not executable/.test(l));
  assert.deepEqual(other, [], 'only missing-path complaints');
  // A copy pointing at paths that exist here must verify cleanly, warnings included.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-unit-'));
  try {
    const copy = path.join(dir, 'sluice.service');
    const text = fs.readFileSync(unit, 'utf8').replaceAll('/usr/bin/node', process.execPath).replaceAll('/opt/sluice', ROOT);
    fs.writeFileSync(copy, text);
    const r = spawnSync('systemd-analyze', ['verify', copy], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(`${r.stdout}${r.stderr}`.trim(), '', 'no warnings');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
