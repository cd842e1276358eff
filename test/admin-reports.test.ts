// The operator console's reports and bundles pages against a real server: a report filed through the
// API shows up in the queue and beside its bundle's files and hashes; the console's actions take
// effect at once on the serving process (451 right after a quarantine, even with the database's change
// announcements switched off), are audited under the session's label, and refuse forms without the
// session's token or from another site. Lists page by key: every row once, in order.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { backends, startServer, storedBlobs, type TestServer } from './helpers/server.ts';
import { postReport, sha256, uploadFiles } from './abuse-util.ts';

const LABEL = 'Night <shift> & co';
const HTML_NAME = '<img src=x onerror=alert(1)>.txt';

interface Signed {
  cookie: string;
  csrf: string;
}

async function signIn(srv: TestServer): Promise<Signed> {
  const r = await srv.cli(['admin', 'link', '--label', LABEL]);
  assert.equal(r.code, 0, r.stderr);
  const res = await request(`${srv.url}${new URL(r.stdout.trim()).pathname}`, { method: 'POST' });
  await res.body.dump();
  const cookie = /^(sluice_admin=[^;]+)/.exec(String(res.headers['set-cookie'] ?? ''))![1]!;
  const csrf = /name="csrf" value="([^"]+)"/.exec((await page(srv, cookie, '/admin/reports')).body)![1]!;
  return { cookie, csrf };
}

async function page(srv: TestServer, cookie: string, path: string): Promise<{ status: number; body: string }> {
  const res = await request(`${srv.url}${path}`, { headers: { cookie } });
  return { status: res.statusCode, body: await res.body.text() };
}

/** Posts a console form; the status and, after a redirect, where it leads and the notice it carries. */
async function post(
  srv: TestServer, cookie: string, path: string, fields: Record<string, string>, headers: Record<string, string> = {},
): Promise<{ status: number; to: string; notice: string }> {
  const res = await request(`${srv.url}${path}`, {
    method: 'POST',
    headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(fields).toString(),
  });
  await res.body.dump();
  const to = String(res.headers.location ?? '');
  return { status: res.statusCode, to: to.replace(/[?&]done=.*$/, ''), notice: new URL(to || '/', 'http://x').searchParams.get('done') ?? '' };
}

const status = async (srv: TestServer, path: string): Promise<number> => {
  const res = await request(`${srv.url}${path}`);
  await res.body.dump();
  return res.statusCode;
};

for (const backend of backends().slice(0, 1)) {
  describe(`operator console: reports and bundles (${backend})`, () => {
    let srv: TestServer;
    let s: Signed;
    const a = randomBytes(200);
    const b = randomBytes(300);
    let code = '';
    let fileIds: number[] = [];
    let reportId = 0;
    before(async () => {
      srv = await startServer(backend, { SWEEP_INTERVAL_SECONDS: '86400' });
      s = await signIn(srv);
      const up = await uploadFiles(srv, [{ name: 'a.txt', data: a }, { name: HTML_NAME, data: b }]);
      assert.equal(up.status, 201, JSON.stringify(up.json));
      code = up.json.short_code as string;
      fileIds = (up.json.files as Array<{ id: number }>).map((f) => f.id);
      const r = await postReport(srv, { short_code: code, reason: 'malware', details: '<script>alert("x")</script> see a.txt', contact: 'me@example.org' });
      assert.equal(r.status, 201, JSON.stringify(r.json));
      reportId = r.json.report_id as number;
    });
    after(() => srv?.close());

    test('a report is in the queue and on its page beside the bundle, every text escaped; hashing records the SHA-256s', async () => {
      const queue = await page(srv, s.cookie, '/admin/reports');
      assert.equal(queue.status, 200);
      assert.match(queue.body, new RegExp(`<a href="/admin/reports/${reportId}">${reportId}</a>`));
      assert.match(queue.body, new RegExp(`href="/admin/bundles/${code}"`));
      assert.match(queue.body, /&lt;script&gt;alert\(&quot;x&quot;\)&lt;\/script&gt;/);
      assert.doesNotMatch(queue.body, /<script>alert/);
      const before = await page(srv, s.cookie, `/admin/reports/${reportId}`);
      assert.equal(before.status, 200);
      for (const text of ['malware', 'me@example.org', 'a.txt', '&lt;img src=x onerror=alert(1)&gt;.txt', '200 B', '300 B', 'anonymous', 'not recorded']) {
        assert.ok(before.body.includes(text), `the report's page shows ${text}`);
      }
      assert.doesNotMatch(before.body, /<img src=x/);
      // Nothing was blocked when they were uploaded, so nothing hashed them: the console does.
      const hashed = await post(srv, s.cookie, `/admin/bundles/${code}/hash`, { csrf: s.csrf, back: `/admin/reports/${reportId}` });
      assert.equal(hashed.status, 303);
      assert.equal(hashed.to, `/admin/reports/${reportId}`);
      assert.match(hashed.notice, /Hashed 2 files/);
      const shown = await page(srv, s.cookie, `/admin/reports/${reportId}?done=${encodeURIComponent(hashed.notice)}`);
      assert.ok(shown.body.includes(sha256(a)) && shown.body.includes(sha256(b)), 'both SHA-256s are shown');
      assert.match(shown.body, /<p class="notice" role="status">Hashed 2 files/);
      assert.equal((await page(srv, s.cookie, '/admin/reports/999999')).status, 404);
    });

    test('a quarantine from the console answers 451 at once on this server, without waiting for the change feed', async () => {
      for (let i = 0; i < 3; i++) assert.equal(await status(srv, `/${code}`), 200); // cached now
      // Without the database's announcement only the console's own cache drop can make this 451 now.
      await srv.sql`alter table bundles disable trigger bundles_changed`;
      try {
        const q = await post(srv, s.cookie, `/admin/bundles/${code}/quarantine`, { csrf: s.csrf, back: `/admin/reports/${reportId}` });
        assert.equal(q.status, 303);
        assert.equal(q.to, `/admin/reports/${reportId}`);
        assert.match(q.notice, new RegExp(`Quarantined ${code}`));
        assert.equal(await status(srv, `/${code}`), 451);
        assert.equal(await status(srv, `/api/v1/bundle/${code}`), 451);
        assert.equal(await status(srv, `/api/v1/download/${fileIds[0]}`), 451);
        assert.match((await page(srv, s.cookie, `/admin/bundles/${code}`)).body, /<strong>quarantined<\/strong>/);
        const r = await post(srv, s.cookie, `/admin/bundles/${code}/release`, { csrf: s.csrf, back: `/admin/bundles/${code}` });
        assert.equal(r.to, `/admin/bundles/${code}`);
        assert.equal(await status(srv, `/${code}`), 200);
      } finally {
        await srv.sql`alter table bundles enable trigger bundles_changed`;
      }
    });

    test('a POST without the token, with a wrong one, or from another site is refused and changes nothing', async () => {
      const audited = (await srv.cli(['audit'])).stdout;
      for (const [fields, headers] of [
        [{ back: `/admin/bundles/${code}` }, {}],
        [{ csrf: 'wrong', back: `/admin/bundles/${code}` }, {}],
        [{ csrf: s.csrf, back: `/admin/bundles/${code}` }, { origin: 'https://evil.example' }],
      ] as const) {
        for (const action of ['quarantine', 'delete', 'expire']) {
          const r = await post(srv, s.cookie, `/admin/bundles/${code}/${action}`, { ...fields, confirm: 'yes' }, headers);
          assert.equal(r.status, 403, `${action} ${JSON.stringify(headers)}`);
        }
        assert.equal((await post(srv, s.cookie, `/admin/reports/${reportId}/close`, fields, headers)).status, 403);
      }
      assert.equal(await status(srv, `/${code}`), 200);
      assert.equal((await srv.sql`select closed_at from reports where id = ${reportId}`)[0]!.closed_at, null);
      assert.equal((await srv.cli(['audit'])).stdout, audited, 'nothing audited');
      // A form may come back only to a console page.
      const r = await post(srv, s.cookie, `/admin/bundles/${code}/release`, { csrf: s.csrf, back: 'https://evil.example/' });
      assert.equal(r.to, `/admin/bundles/${code}`);
    });

    test('blocking a file from the report refuses a new upload of the same bytes and holds the bundle', async () => {
      const r = await post(srv, s.cookie, `/admin/bundles/${code}/block`, { csrf: s.csrf, back: `/admin/reports/${reportId}`, file: String(fileIds[0]), reason: `report ${reportId}` });
      assert.equal(r.status, 303);
      assert.match(r.notice, new RegExp(`Blocked ${sha256(a)}; quarantined ${code}`));
      assert.equal(await status(srv, `/${code}`), 451);
      const again = await uploadFiles(srv, [{ name: 'copy.txt', data: a }]);
      assert.equal(again.status, 422);
      assert.equal(again.json.code, 'BLOCKED_CONTENT');
      assert.ok((await page(srv, s.cookie, '/admin/bundles?q=' + code)).body.includes('<strong>quarantined</strong>'));
    });

    test('closing the report moves it after the open ones', async () => {
      const other = await uploadFiles(srv, [{ name: 'x.bin', data: randomBytes(10) }]);
      const open = await postReport(srv, { short_code: other.json.short_code, reason: 'other' });
      const r = await post(srv, s.cookie, `/admin/reports/${reportId}/close`, { csrf: s.csrf });
      assert.equal(r.to, `/admin/reports/${reportId}`);
      assert.equal(r.notice, `Closed report ${reportId}.`);
      assert.equal((await post(srv, s.cookie, `/admin/reports/${reportId}/close`, { csrf: s.csrf })).notice, `Report ${reportId} was already closed.`);
      assert.match((await page(srv, s.cookie, `/admin/reports/${reportId}`)).body, /closed <time/);
      const queue = (await page(srv, s.cookie, '/admin/reports')).body;
      assert.ok(queue.indexOf(`/admin/reports/${open.json.report_id}"`) < queue.indexOf(`/admin/reports/${reportId}"`), 'open first');
    });

    test('bundles are found by code, vanity, key prefix and SHA-256; a list pages by key, each row once', async () => {
      const key = (await srv.cli(['keys', 'create', '--plan', 'power'])).stdout.trim();
      const prefix = key.slice(0, 12);
      const c = randomBytes(50);
      const owned = await uploadFiles(srv, [{ name: 'c.bin', data: c }], { authorization: `Bearer ${key}` });
      assert.equal(owned.status, 201);
      const ownedCode = owned.json.short_code as string;
      await post(srv, s.cookie, `/admin/bundles/${ownedCode}/hash`, { csrf: s.csrf });
      const search = async (q: string, by = 'any'): Promise<string> => (await page(srv, s.cookie, `/admin/bundles?${new URLSearchParams({ q, by })}`)).body;
      assert.ok((await search(code)).includes(`href="/admin/bundles/${code}"`));
      assert.ok((await search(code, 'code')).includes(`href="/admin/bundles/${code}"`));
      assert.ok((await search(`${srv.url}/${code}`)).includes(`href="/admin/bundles/${code}"`), 'a pasted share link');
      const byKey = await search(prefix);
      assert.ok(byKey.includes(`href="/admin/bundles/${ownedCode}"`) && !byKey.includes(`href="/admin/bundles/${code}"`));
      assert.ok((await search(sha256(c).toUpperCase())).includes(`href="/admin/bundles/${ownedCode}"`));
      assert.ok((await search(sha256(a))).includes(`href="/admin/bundles/${code}"`));
      assert.match(await search('not a thing!'), /class="error"/);
      const detail = (await page(srv, s.cookie, `/admin/bundles/${ownedCode}`)).body;
      for (const text of [prefix, sha256(c), 'c.bin', '50 B', 'active']) assert.ok(detail.includes(text), `the bundle's page shows ${text}`);

      // 120 more bundles of the key, made in one statement: one created_at, so the page key's id breaks the ties.
      const keyId = (await srv.sql<{ id: number }[]>`select id from api_keys where prefix = ${prefix}`)[0]!.id;
      await srv.sql`update bundles set vanity = 'Console-Name' where short_code = ${ownedCode}`;
      await srv.sql`
        insert into bundles (short_code, upload_token_hash, max_size_bytes, api_key_id, expires_at)
        select 'Z' || lpad(g::text, 4, '0'), sha256(('console-test-' || g)::bytea), 1000, ${keyId}, now() + interval '1 day'
        from generate_series(1, 120) g`;
      assert.ok((await search('console-name', 'vanity')).includes(`href="/admin/bundles/${ownedCode}"`));
      const seen: string[] = [];
      let next: string | null = `/admin/bundles?q=${prefix}`;
      while (next) {
        const body: string = (await page(srv, s.cookie, next)).body;
        seen.push(...[...body.matchAll(/<tr><td><a class="mono" href="\/admin\/bundles\/([A-Za-z0-9]{5})">/g)].map((m) => m[1]!));
        next = /<a class="btn" href="([^"]+)" rel="next">/.exec(body)?.[1]?.replaceAll('&amp;', '&') ?? null;
      }
      assert.equal(seen.length, 121);
      assert.equal(new Set(seen).size, 121, 'each bundle once');
      assert.equal(seen[120], ownedCode, 'newest first: the uploaded one is older');
    });

    test('the report queue pages by key: open ones oldest first, then closed ones, each once', async () => {
      await srv.sql`
        insert into reports (short_code, reason, reporter_hash, created_at, closed_at)
        select 'Q' || lpad(g::text, 4, '0'), 'other', '\\x00'::bytea, now() - g * interval '1 minute',
               case when g % 3 = 0 then now() - g * interval '1 second' end
        from generate_series(1, 130) g`;
      const open = await srv.sql<{ id: number }[]>`select id from reports where closed_at is null order by created_at, id`;
      const closed = await srv.sql<{ id: number }[]>`select id from reports where closed_at is not null order by closed_at desc, id desc`;
      const rows = [...open, ...closed];
      assert.ok(rows.length > 130);
      const seen: number[] = [];
      let next: string | null = '/admin/reports';
      while (next) {
        const body: string = (await page(srv, s.cookie, next)).body;
        seen.push(...[...body.matchAll(/<tr><td><a href="\/admin\/reports\/(\d+)">/g)].map((m) => Number(m[1])));
        next = /<a class="btn" href="([^"]+)" rel="next">/.exec(body)?.[1]?.replaceAll('&amp;', '&') ?? null;
      }
      assert.deepEqual(seen, rows.map((r) => Number(r.id)));
    });

    test('expire and delete from the console; delete removes the stored files; every action is audited under the label', async () => {
      const up = await uploadFiles(srv, [{ name: 'd.bin', data: randomBytes(64) }]);
      const gone = up.json.short_code as string;
      const keys = (await srv.sql<{ storage_key: string }[]>`select storage_key from files f join bundles b on b.id = f.bundle_id where b.short_code = ${gone}`).map((r) => r.storage_key);
      assert.equal(keys.length, 1);
      assert.match((await post(srv, s.cookie, `/admin/bundles/${gone}/delete`, { csrf: s.csrf })).notice, /Nothing deleted/);
      assert.equal(await status(srv, `/${gone}`), 200);
      const ex = await post(srv, s.cookie, `/admin/bundles/${gone}/expire`, { csrf: s.csrf });
      assert.equal(ex.notice, `Expired ${gone}.`);
      assert.notEqual(await status(srv, `/api/v1/bundle/${gone}`), 200);
      const del = await post(srv, s.cookie, `/admin/bundles/${gone}/delete`, { csrf: s.csrf, confirm: 'yes', back: `/admin/bundles/${gone}` });
      assert.equal(del.to, '/admin/bundles');
      assert.equal(del.notice, `Deleted ${gone} and its 1 file.`);
      assert.equal((await srv.sql`select 1 from bundles where short_code = ${gone}`).length, 0);
      assert.ok(!(await storedBlobs(srv)).files.some((f) => f.endsWith(keys[0]!)), 'its stored file is gone');
      assert.equal((await page(srv, s.cookie, `/admin/bundles/${gone}`)).status, 404);

      const audit = (await srv.cli(['audit'])).stdout;
      for (const [action, target] of [
        ['bundles quarantine', code], ['bundles release', code], ['block add', sha256(a)], ['reports close', String(reportId)],
        ['bundles expire', gone], ['bundles delete', gone],
      ]) {
        assert.ok(audit.split('\n').some((l) => l.includes(`\t${action}\t${target}\t${LABEL}`)), `${action} ${target} under the session's label:\n${audit}`);
      }
    });
  });
}
