/** Shared by access.test.ts and keys.test.ts: key minting, access tokens, other source addresses. */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { Agent } from 'undici';
import type { TestServer } from './helpers/server.ts';
import { call, type Res } from './helpers/http.ts';

export const SQL_TS = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
export const ISO_TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00$/;
export const KEY_RE = /^sk_[A-Za-z0-9]{43}$/;
export const DAY_MS = 86_400_000;
export const GIB = 1024 ** 3;
export const fromSqlUtc = (s: string): number => Date.parse(`${s.replace(' ', 'T')}Z`);

/** A loopback source address of its own (the server must listen on 0.0.0.0 to accept it). */
export const randomLoopback = (): string => `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
export const from = (ip: string): Agent => new Agent({ localAddress: ip });

/** The interface's error shape with the expected status. */
export function assertError(r: Res, status: number, what = ''): void {
  assert.equal(r.status, status, `${what}: ${r.text}`);
  assert.equal(r.json?.success, false, `${what}: ${r.text}`);
  assert.equal(typeof r.json.error, 'string');
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

