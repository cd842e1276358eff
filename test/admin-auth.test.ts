// The operator console's sign-in and sessions against a real server: one-time links from the CLI,
// the cookie's attributes, and everything that must get nothing (a used, expired or forged link, a
// cookie signed with another SECRET, a revoked session, no session at all).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';

const SECRET = 'console-test-secret-0123456789abcdef-xyz';

async function get(srv: TestServer, path: string, cookie?: string): Promise<{ status: number; body: string }> {
  const res = await request(`${srv.url}${path}`, { headers: cookie ? { cookie } : {} });
  return { status: res.statusCode, body: await res.body.text() };
}

/** Mints a link with the CLI; its path (`/admin/login/<token>`). */
async function link(srv: TestServer, args: string[] = []): Promise<string> {
  const r = await srv.cli(['admin', 'link', ...args]);
  assert.equal(r.code, 0, r.stderr);
  const url = r.stdout.trim();
  assert.match(url, /^http:\/\/[^/]+\/admin\/login\/[A-Za-z0-9_-]{43}$/);
  return new URL(url).pathname;
}

/** Uses a link: the `sluice_admin=…` cookie pair it sets, or null with the status. */
async function signIn(srv: TestServer, path: string): Promise<{ status: number; cookie: string | null; setCookie: string }> {
  const res = await request(`${srv.url}${path}`, { method: 'POST' });
  await res.body.dump();
  const setCookie = String(res.headers['set-cookie'] ?? '');
  return { status: res.statusCode, cookie: /^(sluice_admin=[^;]+)/.exec(setCookie)?.[1] ?? null, setCookie };
}

describe('operator console sign-in', () => {
  let srv: TestServer;
  let notFound = '';
  before(async () => {
    srv = await startServer(backends()[0]!, { SECRET });
    notFound = (await get(srv, '/zzzzz')).body;
  });
  after(async () => {
    await srv?.close();
  });

  test('a link from the CLI signs in once; the cookie is HttpOnly, SameSite=Strict and lasts 12 hours', async () => {
    const path = await link(srv, ['--label', 'night shift']);
    const page = await get(srv, path);
    assert.equal(page.status, 200);
    assert.match(page.body, /Sign in as <strong>night shift<\/strong>/);
    assert.equal((await get(srv, path)).status, 200, 'opening the page uses nothing (link previews)');
    const first = await signIn(srv, path);
    assert.equal(first.status, 303);
    assert.ok(first.cookie, first.setCookie);
    assert.match(first.setCookie, /; HttpOnly/);
    assert.match(first.setCookie, /; SameSite=Strict/);
    assert.match(first.setCookie, /; Max-Age=43200/);
    assert.doesNotMatch(first.setCookie, /; Secure/, 'plain http: a Secure cookie would never come back');
    const console = await get(srv, '/admin', first.cookie!);
    assert.equal(console.status, 200);
    assert.match(console.body, /night shift/);
    const again = await signIn(srv, path);
    assert.equal(again.status, 404, 'a used link gets nothing');
    assert.equal(again.cookie, null);
    assert.equal((await get(srv, path)).status, 404, 'nor does its page');
  });

  test('an expired or forged link gets the 404 page and no cookie', async () => {
    const path = await link(srv, ['--minutes', '1']);
    await srv.sql`update admin_links set expires_at = now() - interval '1 second'`;
    for (const p of [path, '/admin/login/' + 'A'.repeat(43), '/admin/login/short', path.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A'))]) {
      const page = await get(srv, p);
      assert.equal(page.status, 404, p);
      assert.equal(page.body, notFound, 'the same page as any unknown path');
      const r = await signIn(srv, p);
      assert.equal(r.status, 404, p);
      assert.equal(r.cookie, null, p);
    }
  });

  test('without a valid session every /admin path is the site 404 page', async () => {
    const { cookie } = await signIn(srv, await link(srv));
    const [, id, part] = /^sluice_admin=(\d+)\.([^.]+)\.(.+)$/.exec(cookie!)!;
    // A cookie for a real session, signed with another SECRET (another deployment's, or a guess).
    const otherMac = createHmac('sha256', 'another-secret-another-secret-another').update(`admin-session|${id}|${part}`).digest('base64url');
    const forged = [
      `sluice_admin=${id}.${part}.${otherMac}`,
      `sluice_admin=${Number(id) + 1}.${part}.${/\.([^.]+)$/.exec(cookie!)![1]}`,
      'sluice_admin=garbage',
      '',
    ];
    const paths = ['/admin', '/admin/', '/admin/reports', '/admin/bundles', '/admin/keys', '/admin/blocklist', '/admin/audit', '/admin/overview.json', '/admin/nothing-here'];
    for (const c of forged) {
      for (const p of paths) {
        const r = await get(srv, p, c || undefined);
        assert.equal(r.status, 404, `${p} with ${c || 'no cookie'}`);
        assert.equal(r.body, notFound, `${p} reveals nothing`);
      }
      const post = await request(`${srv.url}/admin/logout`, { method: 'POST', headers: c ? { cookie: c } : {}, body: 'csrf=x', });
      assert.equal(post.statusCode, 404);
      await post.body.dump();
    }
    assert.equal((await get(srv, '/admin', cookie!)).status, 200, 'the real cookie still works');
  });

  test('sluice admin sessions lists sessions; revoke ends one, or all, at once', async () => {
    const a = (await signIn(srv, await link(srv, ['--label', 'alice']))).cookie!;
    const b = (await signIn(srv, await link(srv, ['--label', 'bob']))).cookie!;
    const list = await srv.cli(['admin', 'sessions']);
    assert.equal(list.code, 0, list.stderr);
    const alice = list.stdout.split('\n').find((l) => l.split('\t')[1] === 'alice');
    assert.ok(alice, list.stdout);
    const r = await srv.cli(['admin', 'revoke', alice!.split('\t')[0]!]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((await get(srv, '/admin', a)).status, 404);
    assert.equal((await get(srv, '/admin', b)).status, 200);
    assert.equal((await srv.cli(['admin', 'revoke', 'all'])).code, 0);
    assert.equal((await get(srv, '/admin', b)).status, 404);
    const bad = await srv.cli(['admin', 'revoke', 'nobody']);
    assert.equal(bad.code, 1);
  });

  test('signing out ends the session; a sign-out posted from another site is refused', async () => {
    const cookie = (await signIn(srv, await link(srv))).cookie!;
    const page = (await get(srv, '/admin', cookie)).body;
    const csrf = /name="csrf" value="([^"]+)"/.exec(page)![1]!;
    const post = (headers: Record<string, string>, body: string) =>
      request(`${srv.url}/admin/logout`, { method: 'POST', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', ...headers }, body });
    for (const [headers, body] of [[{ origin: 'https://evil.example' }, `csrf=${csrf}`], [{ 'sec-fetch-site': 'cross-site' }, `csrf=${csrf}`], [{}, 'csrf=wrong'], [{}, '']] as const) {
      const r = await post(headers, body);
      assert.equal(r.statusCode, 403, JSON.stringify(headers) + body);
      await r.body.dump();
      assert.equal((await get(srv, '/admin', cookie)).status, 200, 'still signed in');
    }
    const out = await post({}, `csrf=${encodeURIComponent(csrf)}`);
    assert.equal(out.statusCode, 303);
    await out.body.dump();
    assert.equal((await get(srv, '/admin', cookie)).status, 404);
  });

  test('public pages never link to the console', async () => {
    for (const p of ['/', '/zzzzz']) assert.doesNotMatch((await get(srv, p)).body, /\/admin/);
  });
});
