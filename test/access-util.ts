/** Shared by access.test.ts and keys.test.ts: JSON calls, keyed uploads, key minting, other source addresses. */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { Agent, request } from 'undici';
import type { TestServer } from './helpers/server.ts';
import { multipart } from './helpers/multipart.ts';

export const SQL_TS = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
export const ISO_TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00$/;
export const KEY_RE = /^sk_[A-Za-z0-9]{43}$/;
export const DAY_MS = 86_400_000;
export const GIB = 1024 ** 3;
export const fromSqlUtc = (s: string): number => Date.parse(`${s.replace(' ', 'T')}Z`);

/** A loopback source address of its own (the server must listen on 0.0.0.0 to accept it). */
export const randomLoopback = (): string => `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
export const from = (ip: string): Agent => new Agent({ localAddress: ip });

// Test code reads many response shapes; `any` keeps the assertions readable.
export type Json = any;
export interface Res {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: Json;
}
export interface Opts {
  headers?: Record<string, string>;
  body?: Buffer | string;
  agent?: Agent;
}

export async function call(srv: TestServer, method: string, urlPath: string, o: Opts = {}): Promise<Res> {
  const res = await request(`${srv.url}${urlPath}`, { method: method as 'GET', headers: o.headers, body: o.body, dispatcher: o.agent });
  const text = await res.body.text();
  let json: Json = null;
  // (a HEAD answer names the type but carries no body)
  if (text !== '' && /^application\/json/.test(String(res.headers['content-type']))) json = JSON.parse(text);
  return { status: res.statusCode, headers: res.headers, text, json };
}

export const bearer = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

/** The interface's error shape with the expected status. */
export function assertError(r: Res, status: number, what = ''): void {
  assert.equal(r.status, status, `${what}: ${r.text}`);
  assert.equal(r.json?.success, false, `${what}: ${r.text}`);
  assert.equal(typeof r.json.error, 'string');
}

export interface NewFile {
  name: string;
  data: string | Buffer;
  type?: string;
}

export function upload(
  srv: TestServer,
  files: NewFile[],
  o: { key?: string; fields?: Record<string, string>; agent?: Agent; path?: string } = {},
): Promise<Res> {
  const { body, contentType } = multipart([
    ...Object.entries(o.fields ?? {}).map(([name, value]) => ({ name, value })),
    ...files.map((f) => ({ name: 'files[]', filename: f.name, contentType: f.type, data: Buffer.from(f.data) })),
  ]);
  const headers = { 'content-type': contentType, ...(o.key ? bearer(o.key) : {}) };
  return call(srv, 'POST', o.path ?? '/api/v1/upload', { headers, body, agent: o.agent });
}

/** Uploads and asserts success (the interface allows 200 or 201). */
export async function uploaded(srv: TestServer, files: NewFile[], o: Parameters<typeof upload>[2] = {}): Promise<Json> {
  const r = await upload(srv, files, o);
  assert.ok(r.status === 201 || r.status === 200, r.text);
  return r.json;
}

export async function mintKey(srv: TestServer, plan = 'starter', extra: string[] = []): Promise<string> {
  const r = await srv.cli(['keys', 'create', '--plan', plan, ...extra]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^sk_[A-Za-z0-9]{43}\n$/);
  return r.stdout.trim();
}

/** How verifyAccess sends its fields: JSON (the default), an urlencoded form, or a multipart form. */
export type VerifyBody = 'json' | 'form' | 'multipart';

export function verifyAccess(
  srv: TestServer,
  code: string,
  password: string,
  o: { form?: boolean; as?: VerifyBody; agent?: Agent } = {},
): Promise<Res> {
  const as = o.as ?? (o.form ? 'form' : 'json');
  const boundary = 'verify-boundary-7c1e';
  const body =
    as === 'form'
      ? new URLSearchParams({ short_code: code, password }).toString()
      : as === 'multipart'
        ? Object.entries({ short_code: code, password })
            .map(([k, v]) => `--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`)
            .join('') + `--${boundary}--\r\n`
        : JSON.stringify({ short_code: code, password });
  const type = { json: 'application/json', form: 'application/x-www-form-urlencoded', multipart: `multipart/form-data; boundary=${boundary}` }[as];
  return call(srv, 'POST', '/api/verify-access', { headers: { 'content-type': type }, body, agent: o.agent });
}

/**
 * Rate-limit and password-attempt buckets in Redis are named by database ids (`key:<id>`,
 * `pw:<bundle id>:<ip>`), and every test server gets a fresh database on the same Redis: start
 * the ids somewhere random so this run does not share buckets with earlier runs or other files.
 */
export async function isolateIds(srv: TestServer): Promise<void> {
  const start = (): number => randomInt(1, 2 ** 40);
  await srv.sql.unsafe(`select setval('api_keys_id_seq', ${start()}), setval('bundles_id_seq', ${start()})`);
}

/** Polls until `cond` holds (deadline `ms`). */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
