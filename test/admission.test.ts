// Every /api/* route, as the server mounts it, is admitted by the server before its handler: a
// request spends one request of the caller's hourly budget and its answer states the budget. The
// route table is walked, so a new route that escapes admission fails here, whatever it does.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { Agent, request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { stubDeps } from './helpers/stub-deps.ts';
import { routeTable } from '../src/routes/table.ts';
import { isApi, mountedRoutes, type Route } from '../src/http/server.ts';

const LIMIT = 50;
/** A fresh loopback source address per request: each starts with the whole budget. */
const randomLoopback = (): string => `127.${randomInt(1, 255)}.${randomInt(0, 255)}.${randomInt(1, 255)}`;

const METHOD: Record<Route['method'], string> = {
  get: 'GET', post: 'POST', del: 'DELETE', head: 'HEAD', options: 'OPTIONS', patch: 'PATCH', put: 'PUT', any: 'PUT',
};
/** A well-formed value for each path parameter name, so the request reaches its handler. */
const PARAM: Record<string, string> = { code: 'zZ9zZ', id: '1', token: 'a'.repeat(64) };
const TUS_ID = 'f'.repeat(32);

/**
 * The exception CONTRACT.md makes: the requests to a live tus upload's URL carry the headers but
 * are bounded per upload instead of spending the hourly budget. Naming no live upload, they spend.
 */
const PER_UPLOAD = ['OPTIONS /api/v1/tus/:id', 'HEAD /api/v1/tus/:id', 'PATCH /api/v1/tus/:id', 'GET /api/v1/tus/:id'];

// The stand-in answers `billing` too (anything it is not given is a harmless callable proxy).
const apiRoutes = (): Route[] => mountedRoutes(routeTable(stubDeps() as Parameters<typeof routeTable>[0])).filter(isApi);
const label = (r: Route): string => `${METHOD[r.method]} ${r.pattern}`;
const urlOf = (r: Route): string =>
  r.pattern === '/api/*'
    ? '/api/v1/no-such-endpoint'
    : r.pattern.replace(/:([a-z]+)/g, (_, name: string) => (r.pattern.startsWith('/api/v1/tus/') ? TUS_ID : (PARAM[name] ?? '1')));

interface Answer {
  status: number;
  limit: string | undefined;
  remaining: string | undefined;
}

async function ask(srv: TestServer, agent: Agent, method: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  const r = await request(`http://127.0.0.1:${srv.port}${path}`, { method: method as 'GET', headers, dispatcher: agent });
  await r.body.dump();
  const h = (k: string): string | undefined => (r.headers[k] === undefined ? undefined : String(r.headers[k]));
  return { status: r.statusCode, limit: h('x-ratelimit-limit'), remaining: h('x-ratelimit-remaining') };
}

describe('the route table', () => {
  test('lists the /api routes, the per-upload tus exceptions among them', () => {
    const labels = apiRoutes().map(label);
    for (const known of ['POST /api/v1/upload', 'POST /api/v1/upload/:token', 'POST /api/verify-access', 'POST /api/v1/tus/', ...PER_UPLOAD]) {
      assert.ok(labels.includes(known), `${known} is mounted`);
    }
  });
});

for (const backend of backends()) {
  describe(`admission of every /api route (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: String(LIMIT), HOST: '0.0.0.0' });
    });
    after(() => srv?.close());

    test('every /api route spends one request of the budget and states it', async () => {
      const escaped: string[] = [];
      for (const route of apiRoutes()) {
        const agent = new Agent({ localAddress: randomLoopback() });
        try {
          const a = await ask(srv, agent, METHOD[route.method], urlOf(route), { 'tus-resumable': '1.0.0' });
          if (a.limit !== String(LIMIT) || a.remaining !== String(LIMIT - 1)) {
            escaped.push(`${label(route)} → ${a.status}, X-RateLimit-Limit ${a.limit}, X-RateLimit-Remaining ${a.remaining}`);
          }
        } finally {
          await agent.close();
        }
      }
      assert.deepEqual(escaped, [], 'routes that did not spend and state the budget');
    });

    test('the requests to a live tus upload state the budget without spending it', async () => {
      for (const key of PER_UPLOAD) {
        const agent = new Agent({ localAddress: randomLoopback() });
        try {
          const created = await request(`http://127.0.0.1:${srv.port}/api/v1/tus/`, {
            method: 'POST',
            headers: { 'tus-resumable': '1.0.0', 'upload-length': '10' },
            dispatcher: agent,
          });
          await created.body.dump();
          assert.equal(created.statusCode, 201);
          assert.equal(created.headers['x-ratelimit-remaining'], String(LIMIT - 1), 'a creation spends');
          const path = new URL(String(created.headers.location), 'http://x').pathname;
          const headers = { 'tus-resumable': '1.0.0', 'upload-offset': '0', 'content-type': 'application/offset+octet-stream' };
          const a = await ask(srv, agent, key.split(' ')[0]!, path, headers);
          assert.equal(a.limit, String(LIMIT), `${key}: X-RateLimit-Limit`);
          assert.equal(a.remaining, String(LIMIT - 1), `${key} (answered ${a.status}) leaves the hourly budget unspent`);
        } finally {
          await agent.close();
        }
      }
    });
  });
}
