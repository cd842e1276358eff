// The operator console's keys, blocklist and audit pages against a real server: a key minted in the
// console is shown once and works until it is revoked there; a hash blocked there refuses uploads
// until it is removed; the trail lists both under the session's label. API keys reach none of it,
// forms from elsewhere change nothing, and every list pages by key, newest first.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { sha256, uploadFiles } from './abuse-util.ts';

const LABEL = 'night <desk>';
const PLANS = ['starter', 'power', 'max', 'premium'];

interface Answer {
  status: number;
  body: string;
  headers: Record<string, string>;
}

async function call(srv: TestServer, method: 'GET' | 'POST', path: string, o: { cookie?: string; form?: Record<string, string>; headers?: Record<string, string> } = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...o.headers };
  if (o.cookie) headers.cookie = o.cookie;
  if (o.form) headers['content-type'] = 'application/x-www-form-urlencoded';
  const res = await request(`${srv.url}${path}`, { method, headers, body: o.form ? new URLSearchParams(o.form).toString() : undefined });
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) h[k] = String(v);
  return { status: res.statusCode, body: await res.body.text(), headers: h };
}

async function signIn(srv: TestServer, label: string): Promise<string> {
  const r = await srv.cli(['admin', 'link', '--label', label]);
  assert.equal(r.code, 0, r.stderr);
  const res = await request(`${srv.url}${new URL(r.stdout.trim()).pathname}`, { method: 'POST' });
  await res.body.dump();
  return /^(sluice_admin=[^;]+)/.exec(String(res.headers['set-cookie']))![1]!;
}

const csrfOf = (page: string): string => /name="csrf" value="([^"]+)"/.exec(page)![1]!;
const usage = (srv: TestServer, key: string) => call(srv, 'GET', '/api/v1/my/usage', { headers: { authorization: `Bearer ${key}` } });
const unescape = (s: string): string => s.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&');

/** Follows a list's "Older" links from `path`: every row `pick` finds, page by page. */
async function walk(srv: TestServer, cookie: string, path: string, pick: RegExp): Promise<string[][]> {
  const pages: string[][] = [];
  for (let next: string | null = path; next !== null; ) {
    const r = await call(srv, 'GET', next, { cookie });
    assert.equal(r.status, 200, next);
    pages.push([...r.body.matchAll(pick)].map((m) => m[1]!));
    const older = /<a class="btn" href="([^"]+)" rel="next">/.exec(r.body);
    next = older ? unescape(older[1]!) : null;
  }
  return pages;
}

describe('operator console: keys, blocklist, audit trail', () => {
  let srv: TestServer;
  let cookie = '';
  let csrf = '';
  let notFound = '';
  const post = (path: string, form: Record<string, string>, headers: Record<string, string> = {}) =>
    call(srv, 'POST', path, { cookie, form: { csrf, ...form }, headers });
  before(async () => {
    srv = await startServer(backends()[0]!);
    notFound = (await call(srv, 'GET', '/zzzzz')).body;
    cookie = await signIn(srv, LABEL);
    const page = await call(srv, 'GET', '/admin/keys', { cookie });
    assert.equal(page.status, 200);
    csrf = csrfOf(page.body);
  });
  after(async () => {
    await srv?.close();
  });

  test('a key minted in the console is shown once, works, and is refused as soon as it is revoked there', async () => {
    const minted = await post('/admin/keys/mint', { plan: 'power', label: 'partner <b>x</b>', email: '', days: '' });
    assert.equal(minted.status, 200, minted.body);
    assert.equal(minted.headers['cache-control'], 'no-store');
    assert.equal(minted.headers.location, undefined, 'answered in place: the key is in no URL');
    const key = /value="(sk_[A-Za-z0-9]{43})"/.exec(minted.body)?.[1];
    assert.ok(key, minted.body);
    assert.match(minted.body, /partner &lt;b&gt;x&lt;\/b&gt;/, 'escaped');
    const [row] = await srv.sql<{ prefix: string; plan: string; t: string }[]>`select prefix, plan, row_to_json(k)::text as t from api_keys k`;
    assert.equal(row!.prefix, key.slice(0, 12));
    assert.equal(row!.plan, 'power');
    assert.ok(!row!.t.includes(key), 'never stored in clear');
    assert.equal((await usage(srv, key)).status, 200);
    const list = await call(srv, 'GET', '/admin/keys', { cookie });
    assert.ok(list.body.includes(row!.prefix) && !list.body.includes(key), 'the list shows the prefix, never the key');
    assert.match(list.body, /partner &lt;b&gt;x&lt;\/b&gt;/);
    const revoked = await post('/admin/keys/revoke', { prefix: row!.prefix });
    assert.equal(revoked.status, 303);
    const back = await call(srv, 'GET', revoked.headers.location!, { cookie });
    assert.match(back.body, new RegExp(`Revoked ${row!.prefix}`));
    assert.equal((await usage(srv, key)).status, 401, 'refused at once');
    const again = await post('/admin/keys/revoke', { prefix: row!.prefix });
    assert.match(decodeURIComponent(again.headers.location!), /already revoked/);
    const cli = await srv.cli(['keys', 'list']);
    assert.match(cli.stdout, new RegExp(`${row!.prefix}\tpartner <b>x</b>\tpower\trevoked`));
  });

  test('a mint form sent again (a reload of its answer, or twice at once) finds its key and mints no other; filled in anew, it mints', async () => {
    const freshForm = async (label: string): Promise<Record<string, string>> => {
      const page = await call(srv, 'GET', '/admin/keys', { cookie });
      return { plan: 'starter', label, form_id: /name="form_id" value="([^"]+)"/.exec(page.body)![1]! };
    };
    const keysShown = (bodies: string[]): string[] => bodies.flatMap((b) => [...b.matchAll(/value="(sk_[A-Za-z0-9]{43})"/g)].map((m) => m[1]!));
    const listed = async (label: string): Promise<number> => [...(await call(srv, 'GET', '/admin/keys', { cookie })).body.matchAll(new RegExp(`<td>${label}</td>`, 'g'))].length;

    const reloaded = await freshForm('reloaded');
    const first = await post('/admin/keys/mint', reloaded);
    assert.equal(first.status, 200, first.body);
    const [key] = keysShown([first.body]);
    assert.ok(key, first.body);
    const again = await post('/admin/keys/mint', reloaded);
    assert.equal(again.status, 200, again.body);
    assert.deepEqual(keysShown([again.body]), [], 'a key is shown only once');
    assert.match(again.body, new RegExp(`made key <strong class="mono">${key.slice(0, 12)}</strong> \\(active\\)`));
    assert.equal(await listed('reloaded'), 1);
    // The same form filled in anew (a page shown again from the browser's history keeps its name): a new key.
    const refilled = await post('/admin/keys/mint', { ...reloaded, label: 'refilled' });
    assert.equal(refilled.status, 200, refilled.body);
    assert.equal(keysShown([refilled.body]).length, 1, refilled.body);
    assert.notEqual(keysShown([refilled.body])[0], key);
    assert.equal(await listed('refilled'), 1);

    // Sent twice at once: the column's unique index lets one of them mint.
    const raced = await freshForm('raced');
    const both = await Promise.all([post('/admin/keys/mint', raced), post('/admin/keys/mint', raced)]);
    assert.deepEqual(both.map((r) => r.status), [200, 200]);
    assert.equal(keysShown(both.map((r) => r.body)).length, 1);
    assert.equal(both.filter((r) => /was already minted/.test(r.body)).length, 1);
    assert.equal(await listed('raced'), 1);
  });

  test('minting checks its fields as `sluice keys create` does, and makes nothing when they are wrong', async () => {
    const [{ n }] = (await srv.sql<{ n: number }[]>`select count(*)::int as n from api_keys`) as unknown as [{ n: number }];
    const bad: Array<[Record<string, string>, RegExp]> = [
      [{ plan: 'gold' }, /plan must be one of starter, power, max, premium/],
      [{ plan: '' }, /plan must be one of/],
      [{ plan: 'starter', email: 'not-an-address' }, /invalid email: not-an-address/],
      [{ plan: 'starter', days: '0' }, /invalid days: 0/],
      [{ plan: 'starter', days: '1.5' }, /invalid days/],
      [{ plan: 'starter', label: 'a\tb' }, /label must not contain tabs/],
    ];
    for (const [form, why] of bad) {
      const r = await post('/admin/keys/mint', form);
      assert.equal(r.status, 400, JSON.stringify(form));
      assert.match(r.body, why);
      assert.doesNotMatch(r.body, /sk_[A-Za-z0-9]{43}/);
    }
    const [after] = await srv.sql<{ n: number }[]>`select count(*)::int as n from api_keys`;
    assert.equal(after!.n, n);
    const pass = await post('/admin/keys/mint', { plan: 'starter', email: 'ops@example.com', days: '3' });
    assert.equal(pass.status, 200);
    const [k] = await srv.sql<{ days: number; owner_email: string }[]>`
      select round(extract(epoch from expires_at - created_at) / 86400)::int as days, owner_email from api_keys order by id desc limit 1`;
    assert.deepEqual({ ...k }, { days: 3, owner_email: 'ops@example.com' });
  });

  test('a hash blocked in the console refuses uploads of those bytes until it is removed there', async () => {
    const data = randomBytes(4000);
    const hex = sha256(data);
    for (const bad of ['abc', 'g'.repeat(64), `${hex}0`]) {
      const r = await post('/admin/blocklist/add', { sha256: bad });
      assert.equal(r.status, 400, bad);
      assert.match(r.body, /64 hex digits/);
    }
    assert.equal((await srv.sql`select 1 from blocked_hashes`).length, 0);
    const added = await post('/admin/blocklist/add', { sha256: ` ${hex.toUpperCase()} `, reason: 'known <bad> file' });
    assert.equal(added.status, 303);
    const page = await call(srv, 'GET', added.headers.location!, { cookie });
    assert.match(page.body, new RegExp(`Blocked ${hex}`));
    assert.match(page.body, /known &lt;bad&gt; file/);
    const refused = await uploadFiles(srv, [{ name: 'x.bin', data }]);
    assert.equal(refused.status, 422, JSON.stringify(refused.json));
    assert.equal(refused.json.code, 'BLOCKED_CONTENT');
    const removed = await post('/admin/blocklist/remove', { sha256: hex });
    assert.equal(removed.status, 303);
    assert.match(decodeURIComponent(removed.headers.location!), new RegExp(`Removed ${hex}`));
    const ok = await uploadFiles(srv, [{ name: 'x.bin', data }]);
    assert.equal(ok.status, 201, JSON.stringify(ok.json));
    const trail = await srv.sql<{ action: string; operator: string }[]>`select action, operator from audit where target = ${hex} order by id`;
    assert.deepEqual(trail.map((a) => [a.action, a.operator]), [['block add', LABEL], ['block remove', LABEL]]);
  });

  test('the audit trail lists the console\'s actions under the session\'s label, newest first, filtered', async () => {
    const page = await call(srv, 'GET', '/admin/audit', { cookie });
    assert.equal(page.status, 200);
    const rows = [...page.body.matchAll(/<tr><td><time[^>]*>[^<]+<\/time><\/td><td>([^<]+)<\/td><td class="mono">([^<]+)<\/td><td>([^<]+)<\/td>/g)].map((m) => [m[1], m[3]]);
    const actions = rows.map((r) => r[0]);
    for (const a of ['keys create', 'keys revoke', 'block add', 'block remove']) assert.ok(actions.includes(a), `${a} in ${actions.join(', ')}`);
    assert.ok(rows.every((r) => r[1] === 'night &lt;desk&gt;'), JSON.stringify(rows));
    assert.equal(actions[0], 'block remove', 'newest first');
    const byAction = await call(srv, 'GET', `/admin/audit?action=${encodeURIComponent('keys revoke')}`, { cookie });
    const only = [...byAction.body.matchAll(/<tr><td><time[^>]*>[^<]+<\/time><\/td><td>([^<]+)<\/td>/g)].map((m) => m[1]);
    assert.deepEqual(only, ['keys revoke']);
    const other = await call(srv, 'GET', '/admin/audit?operator=someone-else', { cookie });
    assert.match(other.body, /No records match/);
    const mine = await call(srv, 'GET', `/admin/audit?operator=${encodeURIComponent(LABEL)}&action=block+add`, { cookie });
    assert.equal([...mine.body.matchAll(/<td>block add<\/td>/g)].length, 1);
  });

  test('API keys of every plan get the 404 page on every console path and form', async () => {
    const paths = ['/admin', '/admin/keys', '/admin/blocklist', '/admin/audit', '/admin/keys?before=5'];
    const forms = ['/admin/keys/mint', '/admin/keys/revoke', '/admin/blocklist/add', '/admin/blocklist/remove', '/admin/logout'];
    // The keys made here are audited as `keys create`; nothing else may be.
    const [{ n }] = (await srv.sql<{ n: number }[]>`select count(*)::int as n from audit where action <> 'keys create'`) as unknown as [{ n: number }];
    for (const plan of PLANS) {
      const r = await srv.cli(['keys', 'create', '--plan', plan]);
      const key = r.stdout.trim();
      const headers = { authorization: `Bearer ${key}` };
      assert.equal((await usage(srv, key)).status, 200);
      for (const p of paths) {
        const g = await call(srv, 'GET', p, { headers });
        assert.equal(g.status, 404, `${plan} ${p}`);
        assert.equal(g.body, notFound);
      }
      for (const p of forms) {
        const f = await call(srv, 'POST', p, { headers, form: { csrf, plan: 'premium', prefix: key.slice(0, 12), sha256: 'a'.repeat(64) } });
        assert.equal(f.status, 404, `${plan} ${p}`);
        assert.equal(f.body, notFound);
      }
    }
    const [after] = await srv.sql<{ n: number }[]>`select count(*)::int as n from audit where action <> 'keys create'`;
    assert.equal(after!.n, n, 'nothing done');
    assert.equal((await srv.sql`select 1 from blocked_hashes`).length, 0);
    assert.equal((await srv.sql`select 1 from api_keys where revoked_at is not null`).length, 1, 'only the key revoked earlier');
  });

  test('a form without the csrf token or from another site is refused (403) and changes nothing', async () => {
    const key = (await srv.cli(['keys', 'create', '--plan', 'max'])).stdout.trim();
    const hex = 'b'.repeat(64);
    await post('/admin/blocklist/add', { sha256: hex });
    const snapshot = async () =>
      JSON.stringify(await srv.sql`select (select count(*) from api_keys)::int as keys, (select count(*) from api_keys where revoked_at is not null)::int as revoked,
        (select count(*) from blocked_hashes)::int as blocked, (select count(*) from audit)::int as audit`);
    const before = await snapshot();
    const attempts: Array<[string, Record<string, string>]> = [
      ['/admin/keys/mint', { plan: 'premium' }],
      ['/admin/keys/revoke', { prefix: key.slice(0, 12) }],
      ['/admin/blocklist/add', { sha256: 'c'.repeat(64) }],
      ['/admin/blocklist/remove', { sha256: hex }],
    ];
    for (const [path, form] of attempts) {
      const noToken = await call(srv, 'POST', path, { cookie, form });
      assert.equal(noToken.status, 403, `${path} without a token`);
      const wrong = await call(srv, 'POST', path, { cookie, form: { ...form, csrf: `${csrf}x` } });
      assert.equal(wrong.status, 403, `${path} with a wrong token`);
      const evil = await post(path, form, { origin: 'https://evil.example' });
      assert.equal(evil.status, 403, `${path} from another site`);
      assert.doesNotMatch(evil.body, /sk_[A-Za-z0-9]{43}/);
    }
    assert.equal(await snapshot(), before);
    assert.equal((await usage(srv, key)).status, 200);
    await post('/admin/blocklist/remove', { sha256: hex });
  });

  test('lists page by key, newest first: every row once, ties in time included', async () => {
    await srv.sql`insert into audit (action, target, operator) select 'test fill', 'row ' || g, 'filler' from generate_series(1, 230) g`;
    const trail = await walk(srv, cookie, '/admin/audit?operator=filler', /<td class="mono">row (\d+)<\/td>/g);
    assert.deepEqual(trail.map((p) => p.length), [100, 100, 30]);
    assert.deepEqual(trail.flat().map(Number), Array.from({ length: 230 }, (_, i) => 230 - i));
    // 120 hashes blocked in one statement share their created_at to the microsecond.
    await srv.sql`insert into blocked_hashes (sha256, created_by) select sha256(int4send(g)), 'filler' from generate_series(1, 120) g`;
    const hashes = await walk(srv, cookie, '/admin/blocklist', /<td class="mono">([0-9a-f]{64})<\/td>/g);
    assert.deepEqual(hashes.map((p) => p.length), [50, 50, 20]);
    assert.deepEqual(hashes.flat(), hashes.flat().slice().sort().reverse(), 'one order across pages');
    assert.equal(new Set(hashes.flat()).size, 120);
    await srv.sql`delete from blocked_hashes`;
    await srv.sql`insert into api_keys (key_hash, prefix, plan) select sha256(int4send(g)), 'sk_fill' || lpad(g::text, 5, '0'), 'starter' from generate_series(1, 75) g`;
    const keys = await walk(srv, cookie, '/admin/keys', /<td class="mono">(sk_[A-Za-z0-9]+)<\/td>/g);
    assert.deepEqual(keys.map((p) => p.length), [50, (await srv.sql`select 1 from api_keys`).length - 50]);
    assert.equal(keys[0]![0], 'sk_fill00075', 'newest first');
  });
});
