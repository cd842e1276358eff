// Baseline: the usual Node peer. express 5 + multer diskStorage (defaults). Env: PORT, DIR, and FSYNC=1 to
// fsync every stored file and the directory before answering (the durability Sluice gives by default).
// express and multer ship no types here, so they are loaded through require with the few shapes we use.
import { createRequire } from 'node:module';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { open } from 'node:fs/promises';
import path from 'node:path';

interface Req extends IncomingMessage {
  files?: { filename: string; originalname: string; size: number; path: string }[];
}
interface Res extends ServerResponse {
  status(code: number): Res;
  json(body: unknown): void;
}
type Next = (err?: unknown) => void;
type Handler = (req: Req, res: Res, next: Next) => void;
type ErrorHandler = (err: unknown, req: Req, res: Res, next: Next) => void;
interface App {
  get(path: string, ...handlers: Handler[]): void;
  post(path: string, ...handlers: Handler[]): void;
  use(handler: ErrorHandler): void;
  listen(port: number, host: string): unknown;
}
interface Multer {
  (opts: { storage: unknown }): { array(field: string): Handler };
  diskStorage(opts: { destination: string }): unknown;
}

const require = createRequire(import.meta.url);
const express = require('express') as () => App;
const multer = require('multer') as Multer;

const port = Number(process.env.PORT ?? 3000);
const dir = process.env.DIR ?? '/tmp';

const upload = multer({ storage: multer.diskStorage({ destination: dir }) });
const app = express();

app.get('/healthz', (_req, res) => res.json({ success: true }));
const fsync = async (p: string): Promise<void> => {
  const fh = await open(p, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
};
const durable: Handler = (req, _res, next) => {
  if (process.env.FSYNC !== '1') return next();
  Promise.all((req.files ?? []).map((f) => fsync(f.path)))
    .then(() => fsync(path.resolve(dir)))
    .then(() => next(), next);
};

app.post('/api/v1/upload', upload.array('files[]'), durable, (req, res) => {
  const files = (req.files ?? []).map((f) => ({ id: f.filename, name: f.originalname, size: f.size }));
  res.status(files.length > 0 ? 201 : 400).json({ success: files.length > 0, files });
});
app.use((err, _req, res, _next) => {
  res.status(500).json({ success: false, error: String(err) });
});

app.listen(port, '127.0.0.1');
