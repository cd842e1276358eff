import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { request } from 'undici';
import { backends, ROOT, startServer, type TestServer } from './helpers/server.ts';
import type { Route } from '../src/http/server.ts';
import type { Deps } from '../src/deps.ts';
import { stubDeps } from './helpers/stub-deps.ts';
import { ERRORS } from '../src/errors.ts';

type Doc = {
  openapi: string;
  info: { version: string };
  paths: Record<string, Record<string, unknown> & { parameters?: Param[] }>;
  components?: { parameters?: Record<string, Param> };
};
type Param = { name?: string; in?: string; required?: boolean; $ref?: string };
type ErrorCodeDoc = { enum?: string[]; 'x-status'?: Record<string, number> };

const METHODS: Record<string, string> = { get: 'get', post: 'post', del: 'delete', head: 'head', put: 'put', patch: 'patch', options: 'options' };

/** Every route of every src/routes module: each exported `…Routes(deps)` function is called. */
async function implementedRoutes(): Promise<Array<{ method: string; pattern: string; module: string }>> {
  const out: Array<{ method: string; pattern: string; module: string }> = [];
  const files = [
    ...fs.readdirSync(path.join(ROOT, 'src/routes')).filter((f) => f.endsWith('.ts')).map((f) => `routes/${f}`),
    'tus/routes.ts',
  ].sort();
  for (const file of files) {
    const dir = path.join(ROOT, 'src');
    const mod = (await import(pathToFileURL(path.join(dir, file)).href)) as Record<string, unknown>;
    for (const [name, fn] of Object.entries(mod)) {
      if (!/Routes$/.test(name) || typeof fn !== 'function') continue;
      for (const r of (fn as (d: Deps) => Route[])(stubDeps())) out.push({ method: r.method, pattern: r.pattern, module: `${file}:${name}` });
    }
  }
  return out;
}

/** `/x/:name/y` and `/x/{other}/y` both become `/x/{}/y`: parameters compare by position only. */
const uwsShape = (p: string): string => p.replace(/\/:[^/]+/g, '/{}');
const docShape = (p: string): string => p.replace(/\{[^}/]+\}/g, '{}');

/** JSON API routes must be documented; web content paths are outside the document by design. */
const isApi = (pattern: string): boolean => pattern.startsWith('/api/') || pattern === '/healthz';

describe('route table vs openapi.json', () => {
  const doc = JSON.parse(fs.readFileSync(path.join(ROOT, 'src/openapi.json'), 'utf8')) as Doc;

  test('every implemented API route is documented with its method', async () => {
    const routes = await implementedRoutes();
    const known = ['get /api/v1/download/{}', 'post /api/v1/upload', 'del /api/v1/bundle/{}', 'get /healthz'];
    for (const k of known) assert.ok(routes.some((r) => `${r.method} ${uwsShape(r.pattern)}` === k), `route table has ${k}`);

    const documented = new Set<string>();
    for (const [p, item] of Object.entries(doc.paths)) {
      for (const m of Object.keys(item)) documented.add(`${m} ${docShape(p)}`);
    }
    const missing: string[] = [];
    for (const r of routes) {
      if (r.method === 'any' || r.pattern.includes('*') || !isApi(r.pattern)) continue;
      const method = METHODS[r.method];
      assert.ok(method, `unknown method ${r.method} in ${r.module}`);
      if (!documented.has(`${method} ${uwsShape(r.pattern)}`)) missing.push(`${method.toUpperCase()} ${r.pattern} (${r.module})`);
    }
    assert.deepEqual(missing, [], 'routes missing from src/openapi.json');
  });

  test('every code of the error table is documented, with its status', () => {
    const schema = (doc.components as { schemas?: Record<string, { properties?: Record<string, ErrorCodeDoc> }> }).schemas?.Error;
    const code = schema?.properties?.code;
    assert.ok(code, 'components.schemas.Error.properties.code');
    const table = Object.fromEntries(Object.entries(ERRORS).map(([c, [status]]) => [c, status]));
    assert.deepEqual([...(code.enum ?? [])].sort(), Object.keys(table).sort(), 'Error.code enum lists exactly the codes of src/errors.ts');
    assert.deepEqual(code['x-status'], table, 'Error.code x-status gives each code the status src/errors.ts answers it with');
  });

  test('every path template parameter is declared as a required path parameter', () => {
    const resolve = (p: Param): Param => {
      const m = /^#\/components\/parameters\/(.+)$/.exec(p.$ref ?? '');
      return m ? (doc.components?.parameters?.[m[1]!] ?? {}) : p;
    };
    for (const [p, item] of Object.entries(doc.paths)) {
      const names = [...p.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);
      for (const [method, op] of Object.entries(item)) {
        if (method === 'parameters' || typeof op !== 'object' || op === null) continue;
        const params = [...(item.parameters ?? []), ...((op as { parameters?: Param[] }).parameters ?? [])].map(resolve);
        for (const n of names) {
          const decl = params.find((q) => q.in === 'path' && q.name === n);
          assert.ok(decl, `${method.toUpperCase()} ${p}: path parameter ${n} declared`);
          assert.equal(decl.required, true, `${method.toUpperCase()} ${p}: ${n} required`);
        }
      }
    }
  });
});

for (const backend of backends()) {
  describe(`GET /api/v1/openapi.json (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    test('serves the OpenAPI 3.1 document of interface version 1.0.0', async () => {
      const res = await request(`${srv.url}/api/v1/openapi.json`);
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /^application\/json/);
      const served = (await res.body.json()) as Doc;
      assert.match(served.openapi, /^3\.1\.\d+$/);
      assert.equal(served.info.version, '1.0.0');
      assert.ok(Object.keys(served.paths).length > 0);
      const onDisk = JSON.parse(fs.readFileSync(path.join(ROOT, 'src/openapi.json'), 'utf8')) as Doc;
      assert.deepEqual(served, onDisk, 'the served document is src/openapi.json');
    });
  });
}
