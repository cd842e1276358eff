// Download client that counts body bytes and discards them.
// A bare TCP socket reading into one reused 1 MiB buffer (`onread`): on this machine node:http's client
// topped out near 1.4 GB/s on loopback while this reaches ~2.2 GB/s (curl: ~2.3), so the client is not
// what gets measured. It speaks just enough HTTP/1.1: one GET, `Connection: close`, Content-Length bodies.
import net from 'node:net';
import { MiB } from './report.ts';

export interface DownloadResult {
  status: number;
  /** Body bytes received. */
  bytes: number;
  contentLength: number | undefined;
  headers: Record<string, string>;
  ms: number;
}

const MAX_HEAD = 64 * 1024;
/** A download that receives nothing for this long fails instead of hanging the bench (BENCH_IDLE_TIMEOUT s). */
export const IDLE_TIMEOUT_MS = Number(process.env.BENCH_IDLE_TIMEOUT ?? 60) * 1000;

function parseHead(text: string): { status: number; headers: Record<string, string> } {
  const [statusLine = '', ...lines] = text.split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
  if (!m) throw new Error(`bad status line: ${statusLine.slice(0, 80)}`);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status: Number(m[1]), headers };
}

/** GETs url (http only) and counts the body bytes. */
export function download(url: string, extraHeaders: Record<string, string> = {}): Promise<DownloadResult> {
  const u = new URL(url);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    let head: Buffer | undefined = Buffer.alloc(0); // undefined once the header block is parsed
    let status = 0;
    let headers: Record<string, string> = {};
    let contentLength: number | undefined;
    let bytes = 0;
    let settled = false;
    const finish = (err?: Error): void => {
      if (settled) return;
      settled = true;
      socket.destroy();
      if (err) reject(err);
      else resolve({ status, bytes, contentLength, headers, ms: performance.now() - started });
    };
    const onBody = (n: number): void => {
      bytes += n;
      if (contentLength !== undefined && bytes >= contentLength) finish();
    };
    const onHead = (chunk: Uint8Array): void => {
      head = Buffer.concat([head!, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > MAX_HEAD) finish(new Error('response header block too large'));
        return;
      }
      const parsed = parseHead(head.subarray(0, end).toString('latin1'));
      status = parsed.status;
      headers = parsed.headers;
      if (headers['transfer-encoding'] !== undefined) {
        finish(new Error(`Transfer-Encoding ${headers['transfer-encoding']} not supported (expected Content-Length)`));
        return;
      }
      const cl = headers['content-length'];
      contentLength = cl === undefined ? undefined : Number(cl);
      const rest = head.length - end - 4;
      head = undefined;
      onBody(rest);
    };
    const socket = net.connect({
      host: u.hostname,
      port: Number(u.port || 80),
      onread: {
        buffer: Buffer.allocUnsafe(MiB),
        callback(n: number, buf: Uint8Array): boolean {
          if (head === undefined) onBody(n);
          else {
            try {
              onHead(buf.subarray(0, n));
            } catch (err) {
              finish(err instanceof Error ? err : new Error(String(err)));
            }
          }
          return true;
        },
      },
    });
    const extra = Object.entries(extraHeaders).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    socket.write(`GET ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\n${extra}\r\n`);
    socket.setTimeout(IDLE_TIMEOUT_MS, () =>
      finish(new Error(`no data for ${IDLE_TIMEOUT_MS / 1000} s (status ${status}, ${bytes} body bytes so far)`)),
    );
    socket.on('error', finish);
    // without Content-Length the body ends with the connection
    socket.on('end', () => finish(head === undefined ? undefined : new Error('connection closed before headers')));
    socket.on('close', () => finish(new Error('connection closed')));
  });
}
