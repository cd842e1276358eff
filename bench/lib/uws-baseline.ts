// The app both bare uWebSockets.js baselines (bench/baselines/uws-sink.ts, uws-disk.ts) serve: the
// binding loaded as Sluice loads it (the native binary or nothing), GET /healthz, POST
// /api/v1/upload handled by `upload`, and whatever routes `more` adds. Env: PORT.
import { loadUws } from '../../src/http/uws.ts';

type Uws = ReturnType<typeof loadUws>['uws'];
export type App = ReturnType<Uws['App']>;
export type UploadHandler = Parameters<App['post']>[1];
export type Response = Parameters<UploadHandler>[0];

/** Answers an upload as these baselines do: the body's size, not a file's (they parse no form). */
export const uploadReply = (size: number): string => JSON.stringify({ success: true, body_bytes: size, files: [{ name: 'body' }] });

export function serveUws(name: string, upload: UploadHandler, more: (app: App, port: number) => void = () => {}): void {
  const port = Number(process.env.PORT ?? 3000);
  const { uws } = loadUws();
  const app = uws.App();
  more(app, port);
  app
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
