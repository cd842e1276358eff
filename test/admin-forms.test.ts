// Every form of the operator console, as its pages render them, posted the ways an attacker could:
// from another site (Origin, Sec-Fetch-Site), without the session's token, with another session's
// token, and with an API key of every plan instead of a session. Each is refused and changes nothing.
// The forms found on the pages must cover every POST route the console mounts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { stubDeps } from './helpers/stub-deps.ts';
import { adminRoutes } from '../src/routes/admin/index.ts';
import { uploaded } from './helpers/http.ts';

interface Form {
  readonly action: string;
  readonly fields: Record<string, string>;
}

/** The post forms of a page, with the values their inputs carry (a checkbox as ticked). */
function formsOf(page: string): Form[] {
  const out: Form[] = [];
  for (const m of page.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/g)) {
    if (!/method="post"/i.test(m[1]!)) continue;
    const action = /action="([^"]+)"/.exec(m[1]!)?.[1];
    if (!action) continue;
    const fields: Record<string, string> = {};
    for (const i of m[2]!.matchAll(/<(?:input|select|textarea)\b([^>]*)>/g)) {
      const name = /name="([^"]+)"/.exec(i[1]!)?.[1];
      if (name) fields[name] = /value="([^"]*)"/.exec(i[1]!)?.[1] ?? 'x';
    }
    out.push({ action: action.replace(/&amp;/g, '&'), fields });
  }
  return out;
}

/** `/admin/bundles/aB3xZ/quarantine` → `/admin/bundles/:code/quarantine`, as the route table names it. */
const patternOf = (action: string, codes: readonly string[], reportId: number): string =>
  codes.reduce((a, c) => a.replace(`/${c}/`, '/:code/'), action).replace(`/reports/${reportId}/`, '/reports/:id/');

describe('every console form refuses what a session did not send', () => {
  let srv: TestServer;
  let cookie = '';
  let code = '';
  let held = '';
  let reportId = 0;
  const keys: Record<string, string> = {};
  const get = async (path: string, headers: Record<string, string> = { cookie }): Promise<{ status: number; body: string }> => {
    const res = await request(`${srv.url}${path}`, { headers });
    return { status: res.statusCode, body: await res.body.text() };
  };
  const post = async (action: string, fields: Record<string, string>, headers: Record<string, string>): Promise<number> => {
    const res = await request(`${srv.url}${action}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
      body: new URLSearchParams(fields).toString(),
    });
    await res.body.dump();
    return res.statusCode;
  };
  const signIn = async (): Promise<string> => {
    const r = await srv.cli(['admin', 'link', '--label', 'forms test']);
    const res = await request(`${srv.url}${new URL(r.stdout.trim()).pathname}`, { method: 'POST' });
    await res.body.dump();
    return /^(sluice_admin=[^;]+)/.exec(String(res.headers['set-cookie']))![1]!;
  };

  before(async () => {
    srv = await startServer(backends()[0]!);
    cookie = await signIn();
    // Uploaded while nothing is blocked: its file is not hashed (the page offers to hash it).
    code = (await uploaded(srv, [{ name: 'evidence.bin', data: randomBytes(2000) }])).short_code;
    held = (await uploaded(srv, [{ name: 'held.bin', data: randomBytes(2000) }])).short_code;
    assert.equal((await srv.cli(['bundles', 'quarantine', held])).code, 0);
    const rep = await request(`${srv.url}/api/v1/reports`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ short_code: code, reason: 'malware' }) });
    reportId = ((await rep.body.json()) as { report_id: number }).report_id;
    for (const plan of ['starter', 'power', 'max', 'premium']) keys[plan] = (await srv.cli(['keys', 'create', '--plan', plan, '--label', `forms ${plan}`])).stdout.trim();
    // Straight into the table: `sluice block add` would hash the stored files.
    await srv.sql`insert into blocked_hashes (sha256, reason, created_by) values (${randomBytes(32)}, 'test', 'test')`;
  });
  after(async () => {
    await srv?.close();
  });

  test('cross-site, tokenless, another session\'s token, or an API key: refused, nothing changed', async () => {
    const pages = ['/admin', '/admin/reports', `/admin/reports/${reportId}`, '/admin/bundles', `/admin/bundles/${code}`, `/admin/bundles/${held}`, '/admin/keys', '/admin/blocklist', '/admin/audit'];
    const forms = new Map<string, Form>();
    for (const p of pages) {
      const page = await get(p);
      assert.equal(page.status, 200, p);
      for (const f of formsOf(page.body)) forms.set(f.action, f);
    }
    const mounted = adminRoutes(stubDeps()).filter((r) => r.method === 'post' && !r.pattern.startsWith('/admin/login/')).map((r) => r.pattern);
    const found = new Set([...forms.keys()].map((a) => patternOf(a.split('?')[0]!, [code, held], reportId)));
    assert.deepEqual([...mounted].sort(), [...found].sort(), 'the pages show a form for every console action');

    const other = await signIn();
    const otherCsrf = /name="csrf" value="([^"]+)"/.exec((await get('/admin', { cookie: other })).body)![1]!;
    const auditBefore = (await srv.cli(['audit'])).stdout;
    for (const f of forms.values()) {
      const tries: Array<[string, Record<string, string>, Record<string, string>, number]> = [
        ['from another site (Origin)', f.fields, { cookie, origin: 'https://evil.example' }, 403],
        ['from another site (Sec-Fetch-Site)', f.fields, { cookie, 'sec-fetch-site': 'cross-site' }, 403],
        ['without the token', { ...f.fields, csrf: '' }, { cookie }, 403],
        ["with another session's token", { ...f.fields, csrf: otherCsrf }, { cookie }, 403],
        ...Object.entries(keys).map(([plan, key]): [string, Record<string, string>, Record<string, string>, number] => [`with a ${plan} key, no session`, f.fields, { authorization: `Bearer ${key}` }, 404]),
      ];
      for (const [how, fields, headers, status] of tries) assert.equal(await post(f.action, fields, headers), status, `${f.action} ${how}`);
    }
    assert.equal((await srv.cli(['audit'])).stdout, auditBefore, 'no action was taken');
    assert.equal((await get(`/${code}`, {})).status, 200, 'the bundle is served');
    for (const key of Object.values(keys)) assert.equal((await get('/api/v1/my/usage', { authorization: `Bearer ${key}` })).status, 200);
    assert.equal((await get('/admin')).status, 200, 'the session is still signed in');
  });
});
