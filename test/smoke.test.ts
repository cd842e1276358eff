import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { backends, startServer } from './helpers/server.ts';
import { multipart } from './helpers/multipart.ts';

for (const backend of backends()) {
  test(`smoke: upload then download (${backend})`, async () => {
    const srv = await startServer(backend);
    try {
      const { body, contentType } = multipart([{ name: 'files[]', filename: 'a.txt', data: Buffer.from('hello') }]);
      const up = await request(`${srv.url}/api/v1/upload`, { method: 'POST', body, headers: { 'content-type': contentType } });
      assert.equal(up.statusCode, 201);
      const json = (await up.body.json()) as { files: Array<{ download_url: string }> };
      const dl = await request(`${srv.url}${json.files[0]!.download_url}`);
      assert.equal(await dl.body.text(), 'hello');
      // The embedded PostgreSQL runs with small shared buffers.
      if (backend === 'embedded') assert.equal((await srv.sql`show shared_buffers`)[0]!.shared_buffers, '16MB');
    } finally {
      await srv.close();
    }
  });
}

for (const backend of backends()) {
  test(`HEAD answers wherever GET does: same status and headers, no body (${backend})`, async () => {
    const srv = await startServer(backend);
    try {
      const { body, contentType } = multipart([{ name: 'files[]', filename: 'a.txt', data: Buffer.from('hello') }]);
      const up = await request(`${srv.url}/api/v1/upload`, { method: 'POST', body, headers: { 'content-type': contentType } });
      const { short_code: code } = (await up.body.json()) as { short_code: string };
      const paths = ['/healthz', '/readyz', '/metrics', '/api/v1/openapi.json', `/api/v1/bundle/${code}`, `/api/v1/bundle/${code}/status`,
        '/api/v1/my/usage', '/api/v1/my/bundles', '/api-keys/portal', '/'];
      for (const p of paths) {
        // One kept-alive connection: a body after a HEAD answer would garble the GET that follows it.
        const head = await request(`${srv.url}${p}`, { method: 'HEAD' });
        const headBody = await head.body.text();
        const get = await request(`${srv.url}${p}`);
        const getBody = await get.body.text();
        assert.equal(head.statusCode, get.statusCode, `${p}: HEAD ${head.statusCode}, GET ${get.statusCode}`);
        assert.notEqual(head.statusCode, 404, p);
        assert.equal(headBody, '', p);
        assert.equal(head.headers['content-type'], get.headers['content-type'], p);
        // (metrics and rate-limit counters move between the two requests; sizes of the fixed bodies match)
        if (!['/metrics', '/readyz'].includes(p) && !p.startsWith('/api/v1/')) {
          assert.equal(head.headers['content-length'], String(Buffer.byteLength(getBody)), p);
        }
      }
    } finally {
      await srv.close();
    }
  });
}

for (const backend of backends()) {
  test(`a known path with a method it does not take: 405 with Allow; an unknown path: 404 (${backend})`, async () => {
    const srv = await startServer(backend);
    try {
      const cases: Array<[string, string, string]> = [
        ['GET', '/api/v1/upload', 'POST'],
        ['PUT', '/api/v1/upload/sometoken', 'POST'],
        ['POST', '/api/v1/bundle/abcde', 'DELETE, GET, HEAD'],
        ['DELETE', '/healthz', 'GET, HEAD'],
        ['PUT', '/api/v1/tus/someid', 'DELETE, GET, HEAD, OPTIONS, PATCH'],
      ];
      for (const [method, p, allow] of cases) {
        const res = await request(`${srv.url}${p}`, { method });
        const body = (await res.body.json()) as { success: boolean; code: string };
        assert.equal(res.statusCode, 405, `${method} ${p}`);
        assert.equal(res.headers['allow'], allow, `${method} ${p}`);
        assert.deepEqual([body.success, body.code], [false, 'METHOD_NOT_ALLOWED'], `${method} ${p}`);
        // an /api/ request counts against the budget like any other
        if (p.startsWith('/api/')) assert.ok(res.headers['x-ratelimit-remaining'] !== undefined, `${method} ${p}`);
      }
      const unknown = await request(`${srv.url}/api/v1/nothing-here`, { method: 'POST' });
      assert.equal(unknown.statusCode, 404);
      assert.equal(((await unknown.body.json()) as { code: string }).code, 'ROUTE_NOT_FOUND');
      // the server still answers the methods the path takes
      assert.equal((await request(`${srv.url}/healthz`)).statusCode, 200);
    } finally {
      await srv.close();
    }
  });
}
