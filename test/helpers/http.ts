/** JSON calls and uploads against a test server: one client for every test file. */
import assert from 'node:assert/strict';
import { type Agent, request } from 'undici';
import type { TestServer } from './server.ts';
import { multipart } from './multipart.ts';

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

