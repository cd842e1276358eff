/** Shared by the upload test files: HTTP and raw-socket clients and the "nothing was kept" checks. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import { request } from 'undici';
import { storedBlobs, type TestServer } from './helpers/server.ts';
import { upload, type NewFile, type Res, type UploadOpts } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

export const MiB = 1 << 20;
export const DAY_MS = 86_400_000;

export interface FileJson { id: number; name: string; size: number; mime_type: string; download_url: string }
export interface Reply {
  success: boolean; error?: string; short_code: string; share_url: string; upload_url: string;
  upload_token: string; expires_at: string; files: FileJson[];
}
export interface Snapshot { parts: string[]; files: string[]; bundles: number; fileRows: number }

export const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** Uploads and asserts 201 (a new bundle). */
export async function created(srv: TestServer, files: NewFile[], o: UploadOpts = {}): Promise<Reply> {
  const r = await upload(srv, files, o);
  assert.equal(r.status, 201, r.text);
  return r.json as Reply;
}

export async function download(srv: TestServer, f: FileJson): Promise<{ data: Buffer; headers: Record<string, unknown> }> {
  const res = await request(`${srv.url}${f.download_url}`);
  assert.equal(res.statusCode, 200);
  return { data: Buffer.from(await res.body.arrayBuffer()), headers: res.headers };
}

export function assertError(r: Pick<Res, 'status' | 'json'>, status: number, pattern?: RegExp): void {
  assert.equal(r.status, status, JSON.stringify(r.json));
  assert.equal(r.json.success, false);
  assert.equal(typeof r.json.error, 'string');
  if (pattern) assert.match(r.json.error, pattern);
}

export const exited = (srv: TestServer): boolean => srv.proc.exitCode !== null || srv.proc.signalCode !== null;

/**
 * Before each test: a server that crashed in an earlier test is started again, so failures stay
 * independent (and no db query is sent to a dying embedded database: postgres.js can hang on it).
 */
export async function ensureRunning(srv: TestServer): Promise<void> {
  if (!exited(srv)) {
    const healthy = await request(`${srv.url}/healthz`).then(
      async (r) => (await r.body.dump(), r.statusCode === 200),
      () => false,
    );
    if (!healthy) await waitFor('the failing server process to exit', () => exited(srv));
  }
  if (exited(srv)) await srv.restart();
  markLog(srv);
}

/** Server stderr since each process started (the harness pipes it and keeps only the start-up part). */
const logs = new WeakMap<object, { text: string }>();
const marks = new WeakMap<TestServer, number>();

/** The server's log (stderr) as it arrives, from the first call on. */
export function logOf(srv: TestServer): { text: string } {
  let entry = logs.get(srv.proc);
  if (!entry) {
    const e = { text: '' };
    srv.proc.stderr?.on('data', (chunk: string | Buffer) => (e.text += String(chunk)));
    logs.set(srv.proc, e);
    entry = e;
  }
  return entry;
}

/**
 * Sends SIGHUP and waits for the line the server logs for it: whatever the server logged while handling
 * earlier requests is in logOf(srv) by then, so a test can assert that a line never came.
 */
export async function logCheckpoint(srv: TestServer): Promise<void> {
  const log = logOf(srv);
  const from = log.text.length;
  srv.proc.kill('SIGHUP');
  await waitFor('the SIGHUP log line', () => log.text.slice(from).includes('SIGHUP: nothing to reload'));
}

interface LogLine { level?: number; msg?: string; err?: string | { message?: string } }

/** Starts watching the server's log for the current test. */
export function markLog(srv: TestServer): void {
  marks.set(srv, logOf(srv).text.length);
}

/**
 * Since markLog or the last call: no error- or fatal-level line and no crash trace. A client that
 * aborts or sends a bad body is not a server error. What it read is not read again, so a line fails
 * only the test it came in.
 */
export function assertNoServerErrors(srv: TestServer): void {
  const from = marks.get(srv) ?? 0;
  const text = logOf(srv).text.slice(from);
  const lines = text.split('\n');
  lines.pop(); // the last line may still be arriving
  marks.set(srv, from + text.lastIndexOf('\n') + 1);
  const bad: string[] = [];
  for (const line of lines) {
    if (line.trim() === '') continue;
    let entry: LogLine;
    try {
      entry = JSON.parse(line) as LogLine;
    } catch {
      bad.push(line.slice(0, 200)); // not a log line: a crash trace
      continue;
    }
    // Some lines log the error's message alone, as a string.
    const err = typeof entry.err === 'string' ? entry.err : (entry.err?.message ?? '');
    if ((entry.level ?? 0) >= 50) bad.push(`level ${entry.level}: ${entry.msg} (${err})`);
  }
  assert.deepEqual(bad, [], 'the server logged errors');
}

/** The server process is alive and still answers. */
export async function assertServes(srv: TestServer): Promise<void> {
  assert.ok(!exited(srv), `server process died (exit ${srv.proc.exitCode}, signal ${srv.proc.signalCode})`);
  const res = await survives(srv, request(`${srv.url}/healthz`));
  assert.equal(res.statusCode, 200);
  await res.body.dump();
}

export async function snapshot(srv: TestServer): Promise<Snapshot> {
  const { parts, files } = await storedBlobs(srv);
  const [row] = await survives(srv, srv.sql<{ bundles: number; files: number }[]>`
    select (select count(*)::int from bundles) as bundles, (select count(*)::int from files) as files`);
  return { parts: parts.sort(), files: files.sort(), bundles: row!.bundles, fileRows: row!.files };
}

/** Polls (deadline 20 s: a passing check ends at once) until disk and db are back to `before` with no temp parts: a failed request keeps nothing. */
export async function assertNothingKept(srv: TestServer, before: Snapshot): Promise<void> {
  const want = { ...before, parts: [] };
  const deadline = Date.now() + 20_000;
  for (;;) {
    assert.ok(!exited(srv), `server process died (exit ${srv.proc.exitCode}, signal ${srv.proc.signalCode})`);
    const now = await snapshot(srv);
    if (JSON.stringify(now) === JSON.stringify(want) || Date.now() > deadline) return assert.deepEqual(now, want);
    await new Promise((r) => setTimeout(r, 50));
  }
}


/** Every stored file is a server-made key with a row, and every row has its file. */
export async function assertDiskMatchesRows(srv: TestServer): Promise<void> {
  const { files } = await storedBlobs(srv);
  for (const p of files) assert.match(p, /^[0-9a-f]{2}\/[0-9a-f]{2}\/[0-9a-f]{32}$/);
  const rows = await srv.sql<{ storage_key: string }[]>`select storage_key from files`;
  assert.deepEqual(files.map((p) => path.basename(p)).sort(), rows.map((r) => r.storage_key).sort());
}

/** The name a download's Content-Disposition carries (filename* preferred); the header must be well-formed. */
export function dispositionName(h: unknown): string {
  const value = String(h);
  assert.match(value, /^attachment; filename="[\x20\x21\x23-\x5b\x5d-\x7e]*"(; filename\*=UTF-8''[A-Za-z0-9!#$&+.^_`|~%-]+)?$/);
  const star = /filename\*=UTF-8''(\S+)$/.exec(value);
  return star ? decodeURIComponent(star[1]!) : /filename="([^"]*)"/.exec(value)![1]!;
}

// ---- raw HTTP/1.1 over node:net, for bodies that are cut, malformed or aborted ----

export interface RawResponse { status: number; headers: Record<string, string>; body: string }

export interface RawConn {
  readonly sock: net.Socket;
  /** A complete response; rejects if the connection closes first. */
  readonly response: Promise<RawResponse>;
  /** Settles when the connection is closed (by either side). */
  readonly closed: Promise<void>;
  /** True once any response byte has arrived. */
  readonly answered: () => boolean;
}

export async function rawConnect(port: number): Promise<RawConn> {
  const sock = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
  let buf = Buffer.alloc(0);
  let answered = false;
  let errorText = '';
  sock.on('error', (err) => (errorText = err.message)); // EPIPE/ECONNRESET once the server hangs up
  const closed = new Promise<void>((r) => sock.once('close', () => r()));
  const response = new Promise<RawResponse>((resolve, reject) => {
    sock.on('data', (d: Buffer) => {
      answered = true;
      buf = Buffer.concat([buf, d]);
      const parsed = parseResponse(buf);
      if (parsed) resolve(parsed);
    });
    sock.once('close', () =>
      reject(new Error(`connection closed without a complete response (${errorText || 'clean close'}): ${JSON.stringify(buf.toString('latin1').slice(0, 300))}`)),
    );
  });
  response.catch(() => {}); // callers that never await it must not trip unhandledRejection
  return { sock, response, closed, answered: () => answered };
}

function parseResponse(buf: Buffer): RawResponse | null {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const [statusLine, ...lines] = buf.subarray(0, end).toString('latin1').split('\r\n');
  const headers: Record<string, string> = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  const length = Number(headers['content-length'] ?? 0);
  if (buf.length < end + 4 + length) return null;
  return {
    status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '')?.[1]),
    headers,
    body: buf.subarray(end + 4, end + 4 + length).toString('utf8'),
  };
}

/** Request line and headers of a multipart POST that announces `contentLength` body bytes. */
export function rawHead(urlPath: string, boundary: string, contentLength: number, extra = ''): string {
  return `POST ${urlPath} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=${boundary}\r\n` +
    `Content-Length: ${contentLength}\r\n${extra}\r\n`;
}

export const partHead = (boundary: string, filename: string): Buffer =>
  Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="files[]"; filename="${filename}"\r\n` +
    'Content-Type: application/octet-stream\r\n\r\n');
export const closing = (boundary: string): Buffer => Buffer.from(`\r\n--${boundary}--\r\n`);
export const newBoundary = (): string => `----raw${randomBytes(8).toString('hex')}`;

/** Writes and waits until the bytes are handed to the kernel (or the socket fails). */
export const write = (sock: net.Socket, data: Buffer | string): Promise<void> =>
  new Promise((resolve) => sock.write(data, () => resolve()));

/**
 * Writes `pieces` one at a time, each handed to the kernel before the next, and stops as soon as
 * the server answers. Returns the body bytes written by then, or null if the answer came only
 * after the last piece (or never).
 */
export async function sendUntilAnswered(c: RawConn, pieces: Iterable<Buffer>): Promise<number | null> {
  let written = 0;
  const answered = new Promise<void>((resolve) => c.sock.once('data', () => resolve()));
  for (const piece of pieces) {
    // Let pending reads run first, so the client stops writing as soon as the answer is in.
    await new Promise((r) => setImmediate(r));
    if (c.answered() || c.sock.destroyed) break;
    await Promise.race([write(c.sock, piece), answered]);
    if (c.answered()) break;
    written += piece.length;
  }
  return c.answered() ? written : null;
}

/** `bytes` of file data as pieces of `piece`'s size, all cut from the same (random) buffer. */
export function* repeated(piece: Buffer, bytes: number): Generator<Buffer> {
  for (let at = 0; at < bytes; at += piece.length) yield at + piece.length <= bytes ? piece : piece.subarray(0, bytes - at);
}

export function assertJsonError(r: RawResponse, status: number, pattern?: RegExp): void {
  assert.equal(r.status, status, r.body);
  assert.match(r.headers['content-type'] ?? '', /^application\/json/);
  const j = JSON.parse(r.body) as { success: unknown; error: unknown };
  assert.equal(j.success, false);
  assert.equal(typeof j.error, 'string');
  if (pattern) assert.match(j.error as string, pattern);
}

/** Awaits a request; if it fails because the server process died meanwhile, says so instead. */
export async function survives<T>(srv: TestServer, what: Promise<T>): Promise<T> {
  try {
    return await what;
  } catch (err) {
    const deadline = Date.now() + 1000;
    while (!exited(srv) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    if (exited(srv)) {
      assert.fail(`server process died during the request (exit ${srv.proc.exitCode}, signal ${srv.proc.signalCode}): ${String(err)}`);
    }
    throw err;
  }
}

/** Creates a tus upload of `length` bytes named `name`; returns its path (the Location's). */
export async function createTus(srv: TestServer, length: number, name: string): Promise<string> {
  const created = await request(`${srv.url}/api/v1/tus/`, {
    method: 'POST',
    headers: { 'tus-resumable': '1.0.0', 'upload-length': String(length), 'upload-metadata': `filename ${Buffer.from(name).toString('base64')}` },
  });
  await created.body.dump();
  assert.equal(created.statusCode, 201);
  return new URL(String(created.headers.location)).pathname;
}
