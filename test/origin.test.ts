/**
 * With BASE_URL unset, links in pages and answers name the origin the request came to: its Host,
 * or X-Forwarded-Proto/-Host from a TRUST_PROXY peer only. A malformed Host never reaches a page
 * or a header (http://localhost:PORT is named instead).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { from, randomLoopback } from './access-util.ts';
import { call, uploaded } from './helpers/http.ts';
import { createOriginOf, validHost } from '../src/http/origin.ts';
import { createIpMatcher } from '../src/http/client-ip.ts';

const ogUrl = (page: string): string | undefined => /<meta property="og:url" content="([^"]*)">/.exec(page)?.[1];
const dataQr = (page: string): string | undefined => /data-qr="([^"]*)"/.exec(page)?.[1];

describe('origin of a request', () => {
  const fallback = (): string => 'http://localhost:8080';
  const originOf = createOriginOf({ baseUrl: undefined, trusted: createIpMatcher(['10.0.0.1']), fallback });
  const req = (headers: Record<string, string>, remoteIp = '192.0.2.7') => ({ headers, remoteIp });

  test('Host names it; malformed or missing Host falls back', () => {
    assert.equal(originOf(req({ host: '192.0.2.2:8080' })), 'http://192.0.2.2:8080');
    assert.equal(originOf(req({ host: 'Files.Example.org' })), 'http://files.example.org');
    assert.equal(originOf(req({ host: '[::1]:8080' })), 'http://[::1]:8080');
    for (const bad of ['', 'a b', 'x"><script>', 'evil.example/path', 'a:99999', 'user@host', 'host:80\r\nX: y', '-a.example', 'a..b']) {
      assert.equal(originOf(req({ host: bad })), 'http://localhost:8080', JSON.stringify(bad));
    }
    assert.equal(originOf(req({})), 'http://localhost:8080');
  });

  test('X-Forwarded-Proto/-Host only from a trusted proxy', () => {
    const fwd = { host: '10.0.0.1:8080', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'files.example.org, inner.example' };
    assert.equal(originOf(req(fwd, '10.0.0.1')), 'https://files.example.org');
    assert.equal(originOf(req(fwd, '192.0.2.7')), 'http://10.0.0.1:8080');
    assert.equal(originOf(req({ host: 'a.example', 'x-forwarded-proto': 'javascript' }, '10.0.0.1')), 'http://a.example');
    assert.equal(originOf(req({ host: 'a.example', 'x-forwarded-host': 'bad host' }, '10.0.0.1')), 'http://localhost:8080');
  });

  test('BASE_URL, when set, is every answer\'s origin', () => {
    const fixed = createOriginOf({ baseUrl: 'https://files.example.com/', trusted: () => true, fallback });
    assert.equal(fixed(req({ host: 'other.example', 'x-forwarded-host': 'x.example' })), 'https://files.example.com');
    assert.equal(validHost('EXAMPLE.org:443'), 'example.org:443');
    assert.equal(validHost('a'.repeat(300)), null);
  });
});

for (const backend of backends()) {
  describe(`links name the request's origin (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      // 0.0.0.0 so that other loopback addresses (untrusted peers) reach it; 127.0.0.1 is the trusted proxy.
      srv = await startServer(backend, { HOST: '0.0.0.0', TRUST_PROXY: '127.0.0.1' });
    });
    after(async () => {
      await srv?.close();
    });

    test('share page, manage page and tus Location follow Host', async () => {
      const b = await uploaded(srv, [{ name: 'a.txt', data: 'hello' }]);
      const agent = from(randomLoopback());
      const host = { host: `192.0.2.2:${srv.port}` };
      const share = await call(srv, 'GET', `/${b.short_code}`, { headers: host, agent });
      assert.equal(ogUrl(share.text), `http://192.0.2.2:${srv.port}/${b.short_code}`);
      assert.match(share.text, new RegExp(`<meta property="og:image" content="http://192\\.0\\.2\\.2:${srv.port}/og/`));
      assert.equal(share.headers['content-security-policy'] && /connect-src 'self'/.test(String(share.headers['content-security-policy'])), true);
      const manage = await call(srv, 'GET', b.upload_url, { headers: host, agent });
      assert.equal(dataQr(manage.text), `http://192.0.2.2:${srv.port}/${b.short_code}`);
      const tus = await call(srv, 'POST', '/api/v1/tus/', {
        headers: { ...host, 'tus-resumable': '1.0.0', 'upload-length': '5', 'upload-metadata': `filename ${Buffer.from('t.txt').toString('base64')}` },
        agent,
      });
      assert.equal(tus.status, 201, tus.text);
      assert.match(String(tus.headers.location), new RegExp(`^http://192\\.0\\.2\\.2:${srv.port}/api/v1/tus/[0-9a-f]+$`));
      assert.equal(b.share_url, `/${b.short_code}`, 'API answers carry relative links');
      await agent.close();
    });

    test('a malformed Host is never echoed; forwarded headers count only from TRUST_PROXY', async () => {
      const b = await uploaded(srv, [{ name: 'a.txt', data: 'hello' }]);
      const agent = from(randomLoopback());
      const evil = await call(srv, 'GET', `/${b.short_code}`, { headers: { host: 'x"><b>evil' }, agent }).catch(() => null);
      if (evil && evil.status === 200) {
        assert.ok(!evil.text.includes('<b>evil'), 'the bad Host is not in the page');
        assert.equal(ogUrl(evil.text), `http://localhost:${srv.port}/${b.short_code}`);
      } else if (evil) assert.ok(evil.status >= 400 && evil.status < 500, `refused with ${evil.status}`);
      const fwd = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'files.example.org' };
      const untrusted = await call(srv, 'GET', `/${b.short_code}`, { headers: fwd, agent });
      assert.equal(ogUrl(untrusted.text), `http://127.0.0.1:${srv.port}/${b.short_code}`);
      const trusted = await call(srv, 'GET', `/${b.short_code}`, { headers: fwd, agent: from('127.0.0.1') });
      assert.equal(ogUrl(trusted.text), `https://files.example.org/${b.short_code}`);
      await agent.close();
    });
  });
}
