import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { simpleParser } from 'mailparser';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { OCTETS, tusCall, tusCreate, tusMeta, tusPatch } from './helpers/tus.ts';
import { assertNothingKept, counts, get, postReport, sha256, uploadFiles, uploadOk } from './abuse-util.ts';
import { waitFor } from './helpers/wait.ts';
import { blockHash } from '../src/db/abuse.ts';
import type { Sql } from '../src/db/sql.ts';

const HTML = `<script>alert("x")</script><img src=x onerror=alert(1)>`;
/** RIGHT-TO-LEFT OVERRIDE: "fdp.exe" after it shows as "exe.pdf". */
const RLO = '\u202e';
const BIDI = /[\u202a-\u202e\u2066-\u2069]/;
const xff = (ip: string): Record<string, string> => ({ 'x-forwarded-for': ip });
let nextIp = 10;
/** A fresh client address per test: each has its own report budget. */
const freshIp = (): Record<string, string> => xff(`203.0.113.${nextIp++}`);

/**
 * Blocks a hash no test uploads, so the server records the SHA-256 of new files, and waits until it
 * has noticed (it looks at most once a second, at an upload): until an upload's file has its SHA-256.
 * Returns the hash.
 */
async function blockUnrelated(srv: TestServer): Promise<string> {
  const other = sha256(randomBytes(32));
  assert.equal((await srv.cli(['block', 'add', other])).code, 0);
  await waitFor('uploads hashed for the blocklist', async () => {
    const r = await uploadFiles(srv, [{ name: 'warm.bin', data: randomBytes(10) }]);
    assert.equal(r.status, 201);
    const id = (r.json.files as Array<{ id: number }>)[0]!.id;
    return (await srv.sql`select sha256 is not null as hashed from files where id = ${id}`)[0]?.hashed === true;
  });
  return other;
}

for (const backend of backends()) {
  describe(`abuse reports, quarantine, blocklist, audit (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { TRUST_PROXY: '127.0.0.1', ABUSE_EMAIL: 'abuse@example.com', SWEEP_INTERVAL_SECONDS: '86400' });
    });
    after(() => srv.close());

    test('a report is stored with a keyed hash of the address, never the address, and answered 201', async () => {
      const up = await uploadOk(srv);
      const ip = '198.51.100.77';
      const r = await postReport(srv, { short_code: up.short_code, reason: 'phishing', details: 'steals passwords', contact: 'me@example.org' }, xff(ip));
      assert.equal(r.status, 201, JSON.stringify(r.json));
      assert.equal(r.json.success, true);
      assert.equal(typeof r.json.report_id, 'number');
      const [row] = await srv.sql<Array<Record<string, unknown>>>`select * from reports where id = ${r.json.report_id as number}`;
      assert.equal(row!.short_code, up.short_code);
      assert.equal(row!.reason, 'phishing');
      assert.equal(row!.details, 'steals passwords');
      assert.equal(row!.contact, 'me@example.org');
      assert.equal((row!.reporter_hash as Buffer).length, 32);
      const stored = JSON.stringify(await srv.sql`select * from reports`);
      assert.ok(!stored.includes(ip) && !stored.includes(Buffer.from(ip).toString('hex')), 'the address is not stored');
      // The same address hashes the same: repeat reporters can be told apart.
      const again = await postReport(srv, { short_code: up.short_code, reason: 'other' }, xff(ip));
      const [row2] = await srv.sql<Array<{ reporter_hash: Buffer }>>`select reporter_hash from reports where id = ${again.json.report_id as number}`;
      assert.deepEqual(row2!.reporter_hash, row!.reporter_hash);
    });

    test('bad reports: unknown code 404, unknown reason, 100 KB of details, long contact 400; nothing stored', async () => {
      const up = await uploadOk(srv);
      const before = (await srv.sql<{ n: number }[]>`select count(*)::int as n from reports`)[0]!.n;
      const h = freshIp();
      const cases: Array<[unknown, number, string]> = [
        [{ short_code: 'ZZZZZ', reason: 'malware' }, 404, 'BUNDLE_NOT_FOUND'],
        [{ short_code: 'no', reason: 'malware' }, 400, 'INVALID_SHORT_CODE'],
        [{ short_code: up.short_code, reason: 'boring' }, 400, 'INVALID_REASON'],
        [{ short_code: up.short_code }, 400, 'INVALID_REASON'],
        [{ short_code: up.short_code, reason: 'other', details: 'x'.repeat(100 * 1024) }, 400, 'DETAILS_TOO_LONG'],
        [{ short_code: up.short_code, reason: 'other', details: 'x'.repeat(4001) }, 400, 'DETAILS_TOO_LONG'],
        [{ short_code: up.short_code, reason: 'other', contact: 'c'.repeat(256) }, 400, 'INVALID_CONTACT'],
        [{ reason: 'other' }, 400, 'INVALID_FIELD'],
      ];
      for (const [body, status, code] of cases) {
        const r = await postReport(srv, body, h);
        assert.equal(r.status, status, JSON.stringify([body, r.json]).slice(0, 300));
        assert.equal(r.json.code, code);
        assert.equal(r.json.success, false);
      }
      const huge = await request(`${srv.url}/api/v1/reports`, { method: 'POST', body: 'x'.repeat(300 * 1024), headers: { 'content-type': 'application/json', ...freshIp() } });
      assert.equal(huge.statusCode, 413);
      await huge.body.dump();
      // Exactly 4000 characters (of 4 bytes each in UTF-8) pass.
      const ok = await postReport(srv, { short_code: up.short_code, reason: 'other', details: '😀'.repeat(4000) }, freshIp());
      assert.equal(ok.status, 201, JSON.stringify(ok.json));
      const after_ = (await srv.sql<{ n: number }[]>`select count(*)::int as n from reports`)[0]!.n;
      assert.equal(after_, before + 1);
    });

    test('a report storm is rate limited: 10 an hour per address (an IPv6 /64 is one address)', async () => {
      const up = await uploadOk(srv);
      const statuses: number[] = [];
      for (let i = 0; i < 12; i++) {
        // Twelve addresses of one /64: one budget.
        const r = await postReport(srv, { short_code: up.short_code, reason: 'other' }, xff(`2001:db8:5:6::${i + 1}`));
        statuses.push(r.status);
        if (r.status === 429) {
          assert.equal(r.json.code, 'RATE_LIMITED');
          assert.ok(Number(r.headers['retry-after']) > 0);
        }
      }
      assert.deepEqual(statuses, [...Array(10).fill(201), 429, 429]);
      // Another address still reports.
      assert.equal((await postReport(srv, { short_code: up.short_code, reason: 'other' }, xff('2001:db8:5:7::1'))).status, 201);
    });

    test('share pages (open and locked) link to a report form; the form posts without script and HTML is escaped', async () => {
      const up = await uploadOk(srv);
      const share = await get(srv, `/${up.short_code}`);
      assert.match(share.text, new RegExp(`href="/report/${up.short_code}"`));
      const { body, contentType } = (await import('./helpers/multipart.ts')).multipart([
        { name: 'files[]', filename: 'x.bin', data: randomBytes(10) },
        { name: 'access_password', value: 'pw' },
      ]);
      const locked = (await (await request(`${srv.url}/api/v1/upload`, { method: 'POST', body, headers: { 'content-type': contentType } })).body.json()) as { short_code: string };
      const prompt = await get(srv, `/${locked.short_code}`);
      assert.match(prompt.text, /type="password"/);
      assert.match(prompt.text, new RegExp(`href="/report/${locked.short_code}"`));

      const form = await get(srv, `/report/${up.short_code}`);
      assert.equal(form.status, 200);
      assert.match(form.text, /<form class="report-form" method="post" action="\/api\/v1\/reports">/);
      assert.doesNotMatch(form.text, /<script>(?!<\/script>)/, 'no inline script');
      assert.equal((await get(srv, '/report/ZZZZZ')).status, 404);

      const h = freshIp();
      const post = await request(`${srv.url}/api/v1/reports`, {
        method: 'POST',
        body: new URLSearchParams({ short_code: up.short_code, reason: 'malware', details: HTML, contact: HTML }).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...h },
      });
      assert.equal(post.statusCode, 303);
      await post.body.dump();
      assert.match(String(post.headers.location), new RegExp(`^/report/${up.short_code}\\?sent=\\d+$`));
      assert.match((await get(srv, String(post.headers.location))).text, /Thank you/);
      // A refused form post shows the form again with the message, as HTML.
      const bad = await request(`${srv.url}/api/v1/reports`, {
        method: 'POST', body: new URLSearchParams({ short_code: up.short_code, reason: '<b>x</b>' }).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...h },
      });
      const badText = await bad.body.text();
      assert.equal(bad.statusCode, 400);
      assert.match(String(bad.headers['content-type']), /text\/html/);
      assert.match(badText, /reason must be one of/);
      assert.match(String(bad.headers['content-security-policy']), /script-src 'self'/);
    });

    test('new reports go to ABUSE_EMAIL in one batched mail, every field escaped', async () => {
      const up = await uploadOk(srv);
      // Earlier tests' reports may have gone out already: their mail opened the batching window.
      await srv.sql`update reports set mailed_at = now() - interval '1 hour' where mailed_at is not null`;
      await postReport(srv, { short_code: up.short_code, reason: 'illegal', details: `${HTML}\nline two ${RLO}fdp.exe`, contact: `${HTML}${RLO}@x` }, freshIp());
      const dir = path.join(srv.dataDir, 'outbox');
      const mails = async (): Promise<Array<Awaited<ReturnType<typeof simpleParser>>>> =>
        Promise.all((fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.eml')) : []).map((f) => simpleParser(fs.readFileSync(path.join(dir, f)))));
      const ours = async (): Promise<Array<Awaited<ReturnType<typeof simpleParser>>>> =>
        (await mails()).filter((m) => m.subject?.includes('abuse report') && (m.text ?? '').includes(`/${up.short_code}`));
      await waitFor('an abuse mail', async () => (await ours()).length > 0);
      const all = await ours();
      assert.equal(all.length, 1, 'the report in one mail');
      const mail = all[0]!;
      assert.equal(mail.to && !Array.isArray(mail.to) ? mail.to.value[0]?.address : '', 'abuse@example.com');
      assert.ok(mail.html && !mail.html.includes('<script>') && !mail.html.includes('<img'), 'HTML escaped');
      assert.ok(mail.html && mail.html.includes('&lt;script&gt;'));
      assert.match(mail.text ?? '', new RegExp(`/${up.short_code}`));
      assert.ok(!BIDI.test(`${mail.text}${mail.html}`), 'no bidi control in the mail');
      assert.match(mail.text ?? '', /line two fdp\.exe/);
      const [unmailed] = await srv.sql<{ n: number }[]>`select count(*)::int as n from reports where mailed_at is null`;
      assert.equal(unmailed!.n, 0);
    });

    test('CLI: reports list, --open, close ID (audited with --by); unknown id exits 1 changing nothing', async () => {
      const up = await uploadOk(srv);
      const r = await postReport(srv, { short_code: up.short_code, reason: 'copyright', details: `tab\there\nnewline\u0007 ${RLO}gpj.exe`, contact: `${HTML}${RLO}` }, freshIp());
      const id = String(r.json.report_id);
      const [stored] = await srv.sql`select details, contact from reports where id = ${Number(id)}`;
      assert.deepEqual([stored!.details, stored!.contact], ['tab\there\nnewline gpj.exe', HTML], 'stored without bidi or other controls; tabs and line breaks kept');
      // A report stored before that rule still lists without its bidi controls.
      await srv.sql`update reports set details = ${`old ${RLO}txt.exe`} where id = ${Number(id)}`;
      const list = await srv.cli(['reports', 'list', '--open']);
      assert.equal(list.code, 0, list.stderr);
      const line = list.stdout.split('\n').find((l) => l.startsWith(`${id}\t`));
      assert.ok(line, list.stdout);
      const cols = line.split('\t');
      assert.equal(cols.length, 8, 'control characters of the reporter never break a row');
      assert.deepEqual(cols.slice(2, 5), ['open', up.short_code, 'copyright']);
      assert.ok(!BIDI.test(line) && line.includes('old txt.exe'), line);
      const closed = await srv.cli(['reports', 'close', id, '--by', 'alice']);
      assert.equal(closed.code, 0, closed.stderr);
      assert.equal(closed.stdout.trim(), `closed report ${id}`);
      assert.ok(!(await srv.cli(['reports', 'list', '--open'])).stdout.split('\n').some((l) => l.startsWith(`${id}\t`)));
      assert.match((await srv.cli(['reports', 'list'])).stdout, new RegExp(`^${id}\\t[^\\t]+\\tclosed\\t`, 'm'));
      for (const args of [['reports', 'close', '999999'], ['reports', 'close', 'abc'], ['reports', 'close'], ['reports', 'list', '--closed']]) {
        const bad = await srv.cli(args);
        assert.equal(bad.code, 1, args.join(' '));
        assert.equal(bad.stderr.trim().split('\n').length, 1);
      }
      const audit = await srv.cli(['audit']);
      assert.match(audit.stdout, new RegExp(`\\treports close\\t${id}\\talice\\t`));
    });

    test('quarantine: every path of the bundle answers 451; files kept; listed as quarantined; release restores', async () => {
      const key = (await srv.cli(['keys', 'create', '--plan', 'starter'])).stdout.trim();
      const auth = { authorization: `Bearer ${key}` };
      const up = await uploadOk(srv, auth);
      const [fileId, picId] = up.files.map((f) => f.id);
      // A tus append begun before the quarantine.
      const tusLoc = await tusCreate(srv, 10, { 'upload-metadata': tusMeta({ filename: 'late.bin', upload_token: up.upload_token }) });
      assert.equal((await tusPatch(srv, tusLoc, 0, Buffer.alloc(5))).status, 204);
      const before = await counts(srv);

      const q = await srv.cli(['bundles', 'quarantine', up.short_code, '--by', 'bob']);
      assert.equal(q.code, 0, q.stderr);
      assert.equal(q.stdout.trim(), `quarantined ${up.short_code}`);

      const tok = { 'x-upload-token': up.upload_token };
      const { body, contentType } = (await import('./helpers/multipart.ts')).multipart([{ name: 'files[]', filename: 'more.bin', data: randomBytes(10) }]);
      const walk: Array<[string, string, Record<string, string>, (Buffer | string)?]> = [
        ['GET', `/api/v1/bundle/${up.short_code}`, {}],
        ['GET', `/api/v1/bundle/${up.short_code}/status`, {}],
        ['DELETE', `/api/v1/bundle/${up.short_code}`, tok],
        ['DELETE', `/api/v1/file/${fileId}?upload_token=${up.upload_token}`, {}],
        ['GET', `/${up.short_code}`, {}],
        ['HEAD', `/${up.short_code}`, {}],
        ['GET', `/d/${fileId}`, {}],
        ['GET', `/d/${picId}?preview=1`, {}],
        ['GET', `/api/v1/download/${fileId}`, {}],
        ['GET', `/zip/${up.short_code}`, {}],
        ['GET', `/og/${up.short_code}.png`, {}],
        ['GET', `/u/${up.upload_token}`, {}],
        ['POST', `/api/v1/upload/${up.upload_token}`, { 'content-type': contentType }, body],
        ['POST', '/api/verify-access', { 'content-type': 'application/json' }, JSON.stringify({ short_code: up.short_code, password: 'x' })],
        ['DELETE', `/api/v1/my/bundles/${up.short_code}`, auth],
        ['HEAD', tusLoc, { 'tus-resumable': '1.0.0' }],
        ['PATCH', tusLoc, { 'tus-resumable': '1.0.0', 'upload-offset': '5', ...OCTETS }, Buffer.alloc(5)],
        ['POST', '/api/v1/tus/', { 'tus-resumable': '1.0.0', 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 'n.bin', upload_token: up.upload_token }) }],
      ];
      for (const [method, p, headers, b] of walk) {
        const res = await request(`${srv.url}${p}`, { method: method as 'GET', headers, body: b });
        const text = method === 'HEAD' ? '' : await res.body.text();
        if (method === 'HEAD') await res.body.dump();
        assert.equal(res.statusCode, 451, `${method} ${p}: ${text.slice(0, 200)}`);
        if (text.startsWith('{')) assert.equal(JSON.parse(text).code, 'UNAVAILABLE_FOR_LEGAL_REASONS', `${method} ${p}`);
        if (method === 'GET' && (p === `/${up.short_code}` || p.startsWith('/u/'))) assert.match(text, /Unavailable for legal reasons/);
      }
      // Evidence kept: rows and bytes.
      const afterWalk = await counts(srv);
      assert.deepEqual(afterWalk, before);
      const mine = (await (await request(`${srv.url}/api/v1/my/bundles`, { headers: auth })).body.json()) as { bundles: Array<Record<string, unknown>> };
      const entry = mine.bundles.find((b) => b.short_code === up.short_code);
      assert.equal(entry?.quarantined, true);
      assert.deepEqual(entry?.files, []);
      // Does not expire while quarantined: past its expiry, a sweep keeps it.
      assert.equal((await srv.cli(['bundles', 'expire', up.short_code])).code, 0);
      assert.match((await srv.cli(['sweep'])).stdout, /expired bundles: 0/);
      assert.equal((await get(srv, `/api/v1/bundle/${up.short_code}`)).status, 451);
      assert.deepEqual(await counts(srv), before);
      // Released, it is an expired bundle again: the next sweep removes it.
      const rel = await srv.cli(['bundles', 'release', up.short_code, '--by', 'bob']);
      assert.equal(rel.stdout.trim(), `released ${up.short_code}`);
      assert.equal((await get(srv, `/api/v1/bundle/${up.short_code}`)).status, 404);
      assert.match((await srv.cli(['sweep'])).stdout, /expired bundles: 1/);
      const audit = (await srv.cli(['audit'])).stdout;
      for (const action of ['bundles quarantine', 'bundles expire', 'bundles release']) assert.match(audit, new RegExp(`\\t${action}\\t${up.short_code}\\t`));
      assert.match(audit, new RegExp(`\\tbundles quarantine\\t${up.short_code}\\tbob`));
    });

    test('release serves the bundle again; quarantine of an unknown or malformed code exits 1', async () => {
      const up = await uploadOk(srv);
      await srv.cli(['bundles', 'quarantine', up.short_code]);
      assert.equal((await get(srv, `/${up.short_code}`)).status, 451);
      await srv.cli(['bundles', 'release', up.short_code]);
      assert.equal((await get(srv, `/${up.short_code}`)).status, 200);
      assert.equal((await get(srv, `/d/${up.files[0]!.id}`)).status, 200);
      const auditBefore = (await srv.cli(['audit'])).stdout;
      for (const args of [['bundles', 'quarantine', 'ZZZZZ'], ['bundles', 'quarantine', 'bad!'], ['bundles', 'release'], ['bundles', 'quarantine', up.short_code, 'extra']]) {
        const r = await srv.cli(args);
        assert.equal(r.code, 1, args.join(' '));
        assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
      }
      assert.equal((await srv.cli(['audit'])).stdout, auditBefore, 'nothing audited');
      // The OS user when no --by is given.
      await srv.cli(['bundles', 'quarantine', up.short_code]);
      const last = (await srv.cli(['audit'])).stdout.trim().split('\n').at(-1)!.split('\t');
      assert.equal(last[1], 'bundles quarantine');
      assert.equal(last[3], (await import('node:os')).userInfo().username);
      const since = await srv.cli(['audit', '--since', '2999-01-01']);
      assert.equal(since.stdout, '');
      assert.equal((await srv.cli(['audit', '--since', 'yesterday'])).code, 1);
    });

    test('blocklist: block add refuses that file on multipart uploads (nothing kept) and quarantines bundles holding it', async () => {
      const bad = randomBytes(5000);
      const hash = sha256(bad);
      // A bundle that holds the file with its hash on record.
      const holder = (await uploadFiles(srv, [{ name: 'bad.bin', data: bad }])).json as { short_code: string; files: Array<{ id: number }> };
      await srv.sql`update files set sha256 = ${Buffer.from(hash, 'hex')} where id = ${holder.files[0]!.id}`;

      for (const args of [['block', 'add', 'xyz'], ['block', 'add', hash.slice(1)], ['block', 'add', `${hash}0`], ['block', 'remove', hash], ['block', 'add', hash, '--colour', 'red']]) {
        const r = await srv.cli(args);
        assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}`);
        assert.equal(r.stderr.trim().split('\n').length, 1);
      }
      assert.equal((await srv.sql`select count(*)::int as n from blocked_hashes`)[0]!.n, 0, 'nothing changed');

      const add = await srv.cli(['block', 'add', hash.toUpperCase(), '--reason', 'known <bad> file', '--by', 'carol']);
      assert.equal(add.code, 0, add.stderr);
      assert.match(add.stdout, new RegExp(`blocked ${hash}; quarantined ${holder.short_code}`));
      assert.equal((await get(srv, `/${holder.short_code}`)).status, 451);
      assert.match((await srv.cli(['block', 'list'])).stdout, new RegExp(`^${hash}\\t[^\\t]+\\tcarol\\tknown <bad> file$`, 'm'));

      // Right away (no wait for any cache), alone or as the second of three files: refused, nothing kept.
      for (const files of [[{ name: 'again.bin', data: bad }], [{ name: 'a', data: randomBytes(100) }, { name: 'b', data: bad }, { name: 'c', data: randomBytes(100) }]]) {
        const before = await counts(srv);
        const r = await uploadFiles(srv, files);
        assert.equal(r.status, 422, JSON.stringify(r.json));
        assert.equal(r.json.code, 'BLOCKED_CONTENT');
        await assertNothingKept(srv, before);
      }
      // Other content passes.
      assert.equal((await uploadFiles(srv, [{ name: 'fine.bin', data: randomBytes(5000) }])).status, 201);

      const rm = await srv.cli(['block', 'remove', hash, '--by', 'carol']);
      assert.equal(rm.code, 0, rm.stderr);
      assert.equal((await uploadFiles(srv, [{ name: 'now.bin', data: bad }])).status, 201);
      const audit = (await srv.cli(['audit'])).stdout;
      assert.match(audit, new RegExp(`\\tblock add\\t${hash}\\tcarol\\tknown <bad> file; quarantined ${holder.short_code}`));
      assert.match(audit, new RegExp(`\\tblock remove\\t${hash}\\tcarol`));
      assert.match(audit, new RegExp(`\\tbundles quarantine\\t${holder.short_code}\\tcarol\\tholds blocked ${hash}`));
    });

    test('blocklist: a blocked file sent through tus in pieces is refused at completion, nothing kept', async () => {
      const bad = randomBytes(300 * 1024);
      const hash = sha256(bad);
      assert.equal((await srv.cli(['block', 'add', hash])).code, 0);
      for (const meta of [{ filename: 'bad.bin' }]) {
        const before = await counts(srv);
        const loc = await tusCreate(srv, bad.length, { 'upload-metadata': tusMeta(meta) });
        const piece = 100 * 1024;
        for (let at = 0; at < bad.length - piece; at += piece) {
          assert.equal((await tusPatch(srv, loc, at, bad.subarray(at, at + piece))).status, 204);
        }
        const last = await tusPatch(srv, loc, 2 * piece, bad.subarray(2 * piece));
        assert.equal(last.status, 422, last.body);
        assert.equal(JSON.parse(last.body).code, 'BLOCKED_CONTENT');
        assert.equal((await tusCall(srv, 'HEAD', loc)).status, 404, 'the upload is gone');
        await assertNothingKept(srv, before);
        const id = loc.split('/').pop()!;
        assert.ok(!fs.readdirSync(path.join(srv.dataDir, 'tus')).some((f) => f.includes(id)), 'no tus part left');
        assert.equal((await srv.sql`select count(*)::int as n from tus_uploads where id = ${id}`)[0]!.n, 0);
      }
      await srv.cli(['block', 'remove', hash]);
    });

    test('while anything is blocked, new files record their SHA-256, so a later block add finds them (multipart and tus)', async () => {
      const other = await blockUnrelated(srv);
      const viaForm = randomBytes(5000);
      const form = (await uploadFiles(srv, [{ name: 'f.bin', data: viaForm }])).json as { short_code: string; files: Array<{ id: number }> };
      const viaTus = randomBytes(150 * 1024);
      const loc = await tusCreate(srv, viaTus.length, { 'upload-metadata': tusMeta({ filename: 't.bin' }) });
      assert.equal((await tusPatch(srv, loc, 0, viaTus)).status, 204);
      const recorded = async (data: Buffer): Promise<string[]> =>
        (await srv.sql<{ short_code: string }[]>`
          select b.short_code from files f join bundles b on b.id = f.bundle_id where f.sha256 = ${Buffer.from(sha256(data), 'hex')}`).map((r) => r.short_code);
      assert.deepEqual(await recorded(viaForm), [form.short_code]);
      const [tusCode] = await recorded(viaTus);
      assert.ok(tusCode, 'the tus upload recorded its hash');
      const add = await srv.cli(['block', 'add', sha256(viaTus)]);
      assert.match(add.stdout, new RegExp(`quarantined ${tusCode}`));
      assert.equal((await get(srv, `/${tusCode}`)).status, 451);
      for (const h of [other, sha256(viaTus)]) await srv.cli(['block', 'remove', h]);
      await srv.cli(['bundles', 'release', tusCode!]);
    });

    test('a block that commits while a checked upload commits: the upload waits for it and is refused, nothing kept (new bundle, append, tus)', async () => {
      const other = await blockUnrelated(srv);
      const target = await uploadOk(srv);
      const senders: Record<string, (data: Buffer) => Promise<{ status: number; code: unknown; check: () => Promise<void> }>> = {
        async 'new bundle'(data) {
          const r = await uploadFiles(srv, [{ name: 'bad.bin', data }]);
          return { status: r.status, code: r.json.code, check: async () => {} };
        },
        async append(data) {
          const r = await uploadFiles(srv, [{ name: 'bad.bin', data }], {}, `/api/v1/upload/${target.upload_token}`);
          return { status: r.status, code: r.json.code, check: async () => {} };
        },
        async tus(data) {
          const loc = await tusCreate(srv, data.length, { 'upload-metadata': tusMeta({ filename: 'bad.bin' }) });
          const r = await tusPatch(srv, loc, 0, data);
          return {
            status: r.status,
            code: r.status === 422 ? JSON.parse(r.body).code : r.body,
            check: async () => assert.equal((await tusCall(srv, 'HEAD', loc)).status, 404, 'the upload is gone'),
          };
        },
      };
      for (const [how, send] of Object.entries(senders)) {
        const bad = randomBytes(20_000);
        const before = await counts(srv);
        let locked!: () => void;
        let commit!: () => void;
        const isLocked = new Promise<void>((r) => (locked = r));
        const go = new Promise<void>((r) => (commit = r));
        // An operator's block, held open: the upload's own check cannot see it yet.
        const block = srv.sql.begin(async (tx) => {
          await blockHash(tx as unknown as Sql, Buffer.from(sha256(bad), 'hex'), 'race', 'test');
          locked();
          await go;
        });
        await isLocked;
        let answered = false;
        const sent = send(bad).finally(() => (answered = true));
        // The upload's commit waits on the operator's open transaction: a session of this server's database waiting on a lock.
        await waitFor(`${how}: the upload's commit to wait for the block`, async () =>
          (await srv.sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`)[0]!.n > 0);
        assert.equal(answered, false, `${how}: the commit waits for the block`);
        commit();
        await block;
        const r = await sent;
        assert.equal(r.status, 422, `${how}: ${String(r.code)}`);
        assert.equal(r.code, 'BLOCKED_CONTENT');
        await r.check();
        await assertNothingKept(srv, before);
        assert.equal((await get(srv, `/${target.short_code}`)).status, 200, 'the bundle appended to is not quarantined: the file never joined it');
        await srv.cli(['block', 'remove', sha256(bad)]);
      }
      await srv.cli(['block', 'remove', other]);
    });

    test('keys revoke, bundles delete and expire are audited with the operator', async () => {
      const key = (await srv.cli(['keys', 'create', '--plan', 'starter', '--label', 'k'])).stdout.trim();
      const prefix = key.slice(0, 12);
      assert.equal((await srv.cli(['keys', 'revoke', prefix, '--by', 'dave'])).code, 0);
      const up = await uploadOk(srv);
      assert.equal((await srv.cli(['bundles', 'delete', up.short_code, '--by=dave'])).code, 0);
      const audit = (await srv.cli(['audit', '--since', new Date(Date.now() - 3_600_000).toISOString()])).stdout;
      assert.match(audit, new RegExp(`\\tkeys revoke\\t${prefix}\\tdave`));
      assert.match(audit, new RegExp(`\\tbundles delete\\t${up.short_code}\\tdave\\t2 file\\(s\\)`));
      assert.equal((await srv.cli(['keys', 'revoke', 'sk_nonexistent'])).code, 1);
      assert.doesNotMatch((await srv.cli(['audit'])).stdout, /sk_nonexistent/);
    });
  });
}
