// The app both bare uWebSockets.js baselines (bench/baselines/uws-sink.ts, uws-disk.ts) serve: the
// binding loaded as Sluice loads it (the native binary or nothing), GET /healthz, and POST
// /api/v1/upload handled by `upload`. Env: PORT.
import { loadUws } from '../../src/http/uws.ts';

type Uws = ReturnType<typeof loadUws>['uws'];
export type UploadHandler = Parameters<ReturnType<Uws['App']>['post']>[1];

/** Answers an upload as these baselines do: the body's size, not a file's (they parse no form). */
export const uploadReply = (size: number): string => JSON.stringify({ success: true, body_bytes: size, files: [{ name: 'body' }] });

export function serveUws(name: string, upload: UploadHandler): void {
  const port = Number(process.env.PORT ?? 3000);
  const { uws } = loadUws();
  uws
    .App()
    .get('/healthz', (res) => {
      res.writeHeader('content-type', 'application/json').end('{"success":true}');
    })
    .post('/api/v1/upload', upload)
    .listen('127.0.0.1', port, (socket) => {
      if (!socket) {
        console.error(`${name}: cannot listen on ${port}`);
        process.exit(1);
      }
    });
}
