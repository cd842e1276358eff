/** JSON calls and uploads against a test server: one client for every test file. */
import assert from 'node:assert/strict';
import { type Agent, request } from 'undici';
import type { TestServer } from './server.ts';
import { multipart, type Part } from './multipart.ts';

// Test code reads many response shapes; `any` keeps the assertions readable.
export type Json = any;
export interface Res {
  status: number;
  /** Lower-case names; a repeated header is joined with ", " as HTTP allows. */
  headers: Record<string, string>;
  text: string;
  json: Json;
}
export interface Opts {
  headers?: Record<string, string>;
  body?: Buffer | string;
  agent?: Agent;
  /** Asserts that the answer is JSON (an API route answers JSON whatever its status). */
  json?: boolean;
}

export async function call(srv: TestServer, method: string, urlPath: string, o: Opts = {}): Promise<Res> {
  const res = await request(`${srv.url}${urlPath}`, { method: method as 'GET', headers: o.headers, body: o.body, dispatcher: o.agent });
  const text = await res.body.text();
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
  const isJson = /^application\/json/.test(headers['content-type'] ?? '');
  if (o.json) assert.ok(isJson, `${method} ${urlPath}: not JSON (${headers['content-type']}): ${text.slice(0, 300)}`);
  // (a HEAD answer names the type but carries no body)
  const json: Json = text !== '' && isJson ? JSON.parse(text) : null;
  return { status: res.statusCode, headers, text, json };
}

export const bearer = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

export interface NewFile {
  name: string;
  data: string | Buffer;
  type?: string;
}

export const file = (name: string, data: string | Buffer, type?: string): NewFile & { data: Buffer } => ({
  name, data: Buffer.from(data), type,
});

export interface UploadOpts {
  /** An API key, sent as a bearer token. */
  key?: string;
  /** Form fields, sent before the files. */
  fields?: Record<string, string>;
  /** Raw parts sent after the files: fields that follow them, or file parts the server must refuse. */
  parts?: Part[];
  headers?: Record<string, string>;
  agent?: Agent;
  /** Default `/api/v1/upload`; `/api/v1/upload/<token>` appends to a bundle. */
  path?: string;
}

/** A multipart upload (every field, file and part in one body); the answer must be JSON. */
export function upload(srv: TestServer, files: NewFile[], o: UploadOpts = {}): Promise<Res> {
  const { body, contentType } = multipart([
    ...Object.entries(o.fields ?? {}).map(([name, value]) => ({ name, value })),
    ...files.map((f) => ({ name: 'files[]', filename: f.name, contentType: f.type, data: Buffer.from(f.data) })),
    ...(o.parts ?? []),
  ]);
  const headers = { 'content-type': contentType, ...(o.key ? bearer(o.key) : {}), ...o.headers };
  return call(srv, 'POST', o.path ?? '/api/v1/upload', { headers, body, agent: o.agent, json: true });
}

/** Uploads and asserts success (the interface allows 200 or 201). */
export async function uploaded(srv: TestServer, files: NewFile[], o: UploadOpts = {}): Promise<Json> {
  const r = await upload(srv, files, o);
  assert.ok(r.status === 201 || r.status === 200, r.text);
  return r.json;
}

