// Baseline: the plain Node way. node:http + busboy + fs.createWriteStream with default options;
// downloads with createReadStream().pipe(res) (64 KiB reads). Env: PORT, DIR.
import http from 'node:http';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import busboy from 'busboy';

const port = Number(process.env.PORT ?? 3000);
const dir = process.env.DIR ?? '/tmp';

interface Stored {
  id: string;
  name: string;
  size: number;
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return; // busboy may report an error after 'close', or vice versa
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function upload(req: http.IncomingMessage, res: http.ServerResponse): void {
  let bb: busboy.Busboy;
  try {
    bb = busboy({ headers: req.headers });
  } catch (err) {
    json(res, 400, { success: false, error: String(err) });
    return;
  }
  const writes: Promise<Stored>[] = [];
  bb.on('file', (field, file, info) => {
    if (field !== 'files[]') {
      file.resume();
      return;
    }
    const id = randomUUID();
    const out = createWriteStream(path.join(dir, id));
    let size = 0;
    file.on('data', (c: Buffer) => (size += c.length));
    writes.push(
      new Promise<Stored>((resolve, reject) => {
        out.on('close', () => resolve({ id, name: info.filename ?? '', size }));
        out.on('error', reject);
        file.on('error', reject);
      }),
    );
    file.pipe(out);
  });
  bb.on('close', () => {
    Promise.all(writes).then(
      (files) => json(res, files.length > 0 ? 201 : 400, { success: files.length > 0, files }),
      (err: unknown) => json(res, 500, { success: false, error: String(err) }),
    );
  });
  bb.on('error', (err) => json(res, 400, { success: false, error: String(err) }));
  req.pipe(bb);
}

async function serveFile(name: string, res: http.ServerResponse): Promise<void> {
  const file = path.join(dir, path.basename(name));
  const st = await stat(file).catch(() => undefined);
  if (!st?.isFile()) return json(res, 404, { success: false, error: 'not found' });
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': st.size });
  createReadStream(file).pipe(res);
}

http
  .createServer((req, res) => {
    const url = req.url ?? '/';
    if (req.method === 'GET' && url === '/healthz') return json(res, 200, { success: true });
    if (req.method === 'POST' && url === '/api/v1/upload') return upload(req, res);
    if (req.method === 'GET' && url.startsWith('/download/')) {
      serveFile(decodeURIComponent(url.slice('/download/'.length)), res).catch((err: unknown) =>
        res.destroy(err instanceof Error ? err : undefined),
      );
      return;
    }
    json(res, 404, { success: false, error: 'not found' });
  })
  .listen(port, '127.0.0.1');
