import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { verifyAccess } from './access-util.ts';
import { call, uploaded, type Res } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

const EVIL_NAME = '<img src=x onerror=alert(1)>.txt';
const EVIL_DESC = '<script>alert(1)</script>';
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; " +
  "form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

function assertHtmlPage(r: Res, status: number): void {
  assert.equal(r.status, status, r.text.slice(0, 300));
  assert.match(String(r.headers['content-type']), /^text\/html; charset=utf-8/);
  assert.equal(r.headers['content-security-policy'], CSP);
  assert.equal(r.headers['x-content-type-options'], 'nosniff');
  assert.equal(r.headers['referrer-policy'], 'no-referrer');
  assert.equal(r.headers['x-frame-options'], 'DENY');
  assert.match(r.text, /^<!doctype html>/);
  // Strict CSP: every script is an external file, none is inline.
  const scripts = [...r.text.matchAll(/<script\b[^>]*>/gi)].map((m) => m[0]);
  for (const s of scripts) assert.match(s, /\ssrc="\/static\/[a-z.-]+\?v=[0-9a-f]{16}"/, s);
  for (const [tag] of r.text.matchAll(/<[a-z][^>]*>/gi)) assert.doesNotMatch(tag, /\son[a-z]+\s*=/i, `inline handler in ${tag}`);
}

const metaContent = (page: string, key: string): string | undefined =>
  new RegExp(`<meta (?:property|name)="${key.replace(/[.:]/g, '\\$&')}" content="([^"]*)">`).exec(page)?.[1];

for (const backend of backends()) {
  describe(`web pages (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    test('GET / is the upload page with the security headers and only external scripts', async () => {
      const r = await call(srv, 'GET', '/');
      assertHtmlPage(r, 200);
      assert.match(r.text, /<form id="upload"[^>]* data-endpoint="\/api\/v1\/upload"/);
      assert.match(r.text, /<input type="file" id="pick" name="files\[\]" multiple>/);
      for (const name of ['description', 'access_password', 'notify_email']) assert.match(r.text, new RegExp(`name="${name}"`));
      assert.match(r.text, /src="\/static\/qrcode\.js\?v=/);
      assert.match(r.text, /src="\/static\/upload\.js\?v=/);
      assert.match(r.text, /<a href="\/api-keys">/, 'the home page links to the plans');
      assert.equal(r.headers['x-ratelimit-limit'], undefined, 'pages spend no rate-limit budget');
      const head = await call(srv, 'HEAD', '/');
      assert.equal(head.status, 200);
      assert.equal(head.text, '');
    });

    test('static assets: ETag, immutable with the current ?v=, no-cache without, 304 on If-None-Match', async () => {
      const page = (await call(srv, 'GET', '/')).text;
      for (const name of ['app.css', 'upload.js', 'qrcode.js']) {
        const url = new RegExp(`/static/${name.replace('.', '\\.')}\\?v=[0-9a-f]{16}`).exec(page)?.[0];
        assert.ok(url, `${name} is referenced with ?v=`);
        const r = await call(srv, 'GET', url);
        assert.equal(r.status, 200);
        assert.equal(r.headers['cache-control'], 'public, max-age=31536000, immutable');
        assert.match(String(r.headers.etag), /^"[0-9a-f]{64}"$/);
        assert.equal(r.headers['x-content-type-options'], 'nosniff');
        assert.match(String(r.headers['content-type']), name.endsWith('.css') ? /^text\/css/ : /^text\/javascript/);
        if (name === 'qrcode.js') assert.match(r.text, /var qrcode = function/);
        const plain = await call(srv, 'GET', `/static/${name}`);
        assert.equal(plain.headers['cache-control'], 'no-cache');
        assert.equal(plain.headers.etag, r.headers.etag);
        const stale = await call(srv, 'GET', `/static/${name}?v=0000000000000000`);
        assert.equal(stale.headers['cache-control'], 'no-cache', 'an old version is never cached forever');
        const cached = await call(srv, 'GET', url, { headers: { 'if-none-match': String(r.headers.etag) } });
        assert.equal(cached.status, 304);
        assert.equal(cached.text, '');
        assert.equal(cached.headers.etag, r.headers.etag);
        const changed = await call(srv, 'GET', url, { headers: { 'if-none-match': '"nope"' } });
        assert.equal(changed.status, 200);
      }
      assert.equal((await call(srv, 'GET', '/static/nope.js')).status, 404);
      assert.equal((await call(srv, 'GET', '/static/..%2Fhtml.ts')).status, 404);
    });

    test('share page lists the files of a public bundle, escaped, with OG tags, and counts the view', async () => {
      const b = await uploaded(
        srv,
        [
          { name: EVIL_NAME, data: 'hello' },
          { name: 'photo.png', data: Buffer.alloc(2048, 1), type: 'image/png' },
        ],
        { fields: { description: EVIL_DESC } },
      );
      const r = await call(srv, 'GET', `/${b.short_code}`);
      assertHtmlPage(r, 200);
      assert.ok(!r.text.includes(EVIL_NAME), 'file name is escaped');
      assert.ok(!r.text.includes(EVIL_DESC), 'description is escaped');
      assert.ok(!r.text.includes('<img src=x'), 'no injected tag');
      assert.ok(r.text.includes('&lt;img src=x onerror=alert(1)&gt;.txt'));
      assert.ok(r.text.includes('&lt;script&gt;alert(1)&lt;/script&gt;'));
      for (const f of b.files) assert.ok(r.text.includes(`href="/d/${f.id}"`), `download link of ${f.id}`);
      assert.ok(r.text.includes(`href="/zip/${b.short_code}"`));
      assert.ok(r.text.includes(`src="/d/${b.files[1].id}?preview=1"`), 'image thumbnail');
      assert.match(r.text, /loading="lazy"/);
      assert.match(r.text, /2 KB · image\/png/);
      assert.match(r.text, /<time class="local-time" datetime="[^"]+" data-utc="\d{4}-\d\d-\d\dT[^"]+Z">\d{4}-\d\d-\d\d \d\d:\d\d UTC<\/time>/);
      // No BASE_URL: absolute links name the origin the request came to.
      assert.equal(metaContent(r.text, 'og:image'), `http://127.0.0.1:${srv.port}/og/${b.short_code}.png`);
      assert.match(metaContent(r.text, 'og:description') ?? '', /^2 files, 2 KB/);
      assert.equal(metaContent(r.text, 'og:title'), '&lt;script&gt;alert(1)&lt;/script&gt;');
      assert.equal(metaContent(r.text, 'og:url'), `http://127.0.0.1:${srv.port}/${b.short_code}`);
      assert.equal(metaContent(r.text, 'twitter:card'), 'summary_large_image');
      const views = async (): Promise<number> =>
        (await srv.sql<{ view_count: number }[]>`select view_count::int as view_count from bundles where short_code = ${b.short_code}`)[0]!.view_count;
      await waitFor('the view to be counted', async () => (await views()) === 1);
      await call(srv, 'GET', `/${b.short_code}`);
      await waitFor('the second view to be counted', async () => (await views()) === 2);
    });

    test('a locked bundle shows the password form, no file names and no description; a valid ?t= shows them', async () => {
      const b = await uploaded(srv, [{ name: 'secret-plans.pdf', data: 'top secret' }], {
        fields: { access_password: 'pw-123', description: 'for the team' },
      });
      const r = await call(srv, 'GET', `/${b.short_code}`);
      assertHtmlPage(r, 200);
      assert.match(r.text, /<form id="unlock"[^>]*>/);
      assert.match(r.text, /name="password" type="password"/);
      assert.ok(!r.text.includes('secret-plans'), 'no file name leaks');
      assert.ok(!r.text.includes(`/d/${b.files[0].id}`), 'no download link leaks');
      assert.ok(!r.text.includes('for the team'), 'no description, in the page or its preview tags');
      assert.ok(!r.text.includes(`/og/${b.short_code}.png`), 'no preview image (it is 404 without a credential)');
      assert.match(r.text, /<meta property="og:title" content="1 file on Sluice">/);
      assert.match(r.text, /src="\/static\/share\.js\?v=/);
      const wrongToken = await call(srv, 'GET', `/${b.short_code}?t=forged`);
      assert.ok(!wrongToken.text.includes('secret-plans'));
      const v = await verifyAccess(srv, b.short_code, 'pw-123');
      assert.equal(v.status, 200, v.text);
      assert.equal(v.json.description, 'for the team', 'the unlocking script shows it from here');
      const t = encodeURIComponent(v.json.access_token);
      const open = await call(srv, 'GET', `/${b.short_code}?t=${t}`);
      assert.equal(open.headers['cache-control'], 'no-store', 'private names and the token in its links: kept nowhere');
      assert.ok(open.text.includes('for the team'));
      assert.ok(open.text.includes('secret-plans.pdf'));
      assert.ok(open.text.includes(`href="/d/${b.files[0].id}?t=${t}"`));
      assert.ok(open.text.includes(`href="/zip/${b.short_code}?t=${t}"`));
    });

    test('/u/<token> of a locked bundle adds files but lists them only with the password', async () => {
      const b = await uploaded(srv, [{ name: 'hidden-name.png', data: 'not really a png' }], { fields: { access_password: 'pw-manage' } });
      const locked = await call(srv, 'GET', b.upload_url);
      assertHtmlPage(locked, 200);
      assert.equal(locked.headers['cache-control'], 'no-store');
      assert.ok(!locked.text.includes('hidden-name'), 'no file name leaks');
      assert.ok(!locked.text.includes(`data-delete="${b.files[0].id}"`) && !locked.text.includes(`/d/${b.files[0].id}`));
      assert.match(locked.text, /<form id="unlock"[^>]*>/);
      assert.ok(locked.text.includes(`data-endpoint="/api/v1/upload/${b.upload_token}"`), 'adding files still works');
      assert.ok(!(await call(srv, 'GET', `${b.upload_url}?t=forged`)).text.includes('hidden-name'));
      const v = await verifyAccess(srv, b.short_code, 'pw-manage');
      assert.equal(v.status, 200, v.text);
      const t = encodeURIComponent(v.json.access_token);
      const open = await call(srv, 'GET', `${b.upload_url}?t=${t}`);
      assert.ok(open.text.includes('hidden-name.png'));
      assert.ok(open.text.includes(`data-delete="${b.files[0].id}"`));
      assert.ok(open.text.includes(`src="/d/${b.files[0].id}?preview=1&amp;t=${t}"`), 'thumbnails carry the token');
    });

    test('unknown, malformed and expired codes get the friendly 404 page', async () => {
      const b = await uploaded(srv, [{ name: 'old.txt', data: 'x' }]);
      await srv.sql`update bundles set expires_at = now() - interval '1 minute' where short_code = ${b.short_code}`;
      for (const p of ['/zzzzz', '/abcdef', '/abc', '/a-b_c', `/${b.short_code}`, '/%3Cscript%3E']) {
        const r = await call(srv, 'GET', p);
        assertHtmlPage(r, 404);
        assert.match(r.text, /Nothing here/);
        assert.ok(!r.text.includes('<script>'), p);
      }
      // The API keeps its JSON errors: the page routes shadow nothing.
      const api = await call(srv, 'GET', '/api/v1/nope');
      assert.equal(api.status, 404);
      assert.equal(api.json?.success, false);
      assert.equal((await call(srv, 'GET', '/healthz')).status, 200);
    });

    test('/u/<token> manages the bundle for a valid token and is 404 otherwise', async () => {
      const b = await uploaded(srv, [{ name: EVIL_NAME, data: 'abc' }]);
      const r = await call(srv, 'GET', b.upload_url);
      assertHtmlPage(r, 200);
      assert.equal(r.headers['cache-control'], 'no-store');
      assert.ok(r.text.includes(`data-endpoint="/api/v1/upload/${b.upload_token}"`));
      assert.ok(r.text.includes(`data-delete="${b.files[0].id}"`));
      assert.ok(!r.text.includes(EVIL_NAME));
      assert.ok(r.text.includes(`/${b.short_code}`));
      for (const p of [`/u/${'0'.repeat(64)}`, '/u/not-a-token', `/u/${b.upload_token.toUpperCase()}`]) {
        assertHtmlPage(await call(srv, 'GET', p), 404);
      }
      await srv.sql`update bundles set expires_at = now() - interval '1 minute' where short_code = ${b.short_code}`;
      assertHtmlPage(await call(srv, 'GET', b.upload_url), 404);
    });

    test('an encrypted bundle: no previews, a link card without its description, the decrypting script, no add form', async () => {
      const b = await uploaded(srv, [{ name: 'photo.png', data: Buffer.alloc(2048, 1), type: 'image/png' }], {
        fields: { description: 'Secret plans', encrypted: '1' },
      });
      const r = await call(srv, 'GET', `/${b.short_code}`);
      assertHtmlPage(r, 200);
      assert.match(r.text, /<section class="card share" id="share" data-code="[^"]+" data-encrypted="1" data-sw="\/static\/age-sw\.js\?v=[0-9a-f]{16}">/);
      assert.match(r.text, /src="\/static\/age\.js\?v=[0-9a-f]{16}"/);
      assert.ok(!r.text.includes('?preview=1'), 'no thumbnail');
      assert.equal(metaContent(r.text, 'og:title'), '1 file on Sluice');
      assert.match(metaContent(r.text, 'og:description') ?? '', /end-to-end encrypted/);
      assert.equal((await call(srv, 'GET', `/d/${b.files[0].id}?preview=1`)).status, 404);
      const sw = await call(srv, 'GET', /\/static\/age-sw\.js\?v=[0-9a-f]{16}/.exec(r.text)![0]);
      assert.equal(sw.status, 200);
      assert.equal(sw.headers['service-worker-allowed'], '/e2e/');
      assert.match(String(sw.headers['content-type']), /^text\/javascript/);
      assert.doesNotMatch(sw.text, /\beval\(|new Function\(/);
      const manage = await call(srv, 'GET', b.upload_url);
      assertHtmlPage(manage, 200);
      assert.ok(!manage.text.includes('id="compose"'), 'the page cannot add files without the key');
      assert.ok(!manage.text.includes('?preview=1'));
    });
  });
}
