import { readFileSync } from 'node:fs';
import { JSON_HEADERS, sendJson, send } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import type { Deps } from '../deps.ts';
import { fromRoot } from '../paths.ts';
import { ping } from '../db/instance.ts';

const OPENAPI = readFileSync(fromRoot('src/openapi.json'));
const READY_TIMEOUT_MS = 1000;

/** 'ok' when `check` resolves within the readiness timeout, else 'failed'. */
async function probe(check: () => Promise<unknown>): Promise<'ok' | 'failed'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('timeout')), READY_TIMEOUT_MS);
  });
  try {
    await Promise.race([check(), timeout]);
    return 'ok';
  } catch {
    return 'failed';
  } finally {
    clearTimeout(timer);
  }
}

export function healthRoutes(deps: Deps): Route[] {
  // What runs, for operators: the uWS binding and its limits, the database kind and, with
  // WORKERS > 1, which worker process answered (0 … N-1). /readyz reports it; /healthz stays the
  // bare {"success":true} that CONTRACT names (a multi-worker server adds X-Sluice-Worker).
  const binding = { package: deps.binding.name, version: deps.binding.version, limits: deps.binding.limits };
  // Off when the installed busboy or streamsearch is not the version the shortcuts were written for.
  const fastPaths = { multipart_search: deps.fastPaths.multipartSearch, straight_to_file: deps.fastPaths.straightToFile };
  const index = deps.config.workerIndex;
  const worker = typeof index === 'number' ? { worker: index } : {};
  const healthHeaders: Array<readonly [string, string]> =
    typeof index === 'number' ? [...JSON_HEADERS, ['X-Sluice-Worker', String(index)]] : [...JSON_HEADERS];
  const health = JSON.stringify({ success: true });
  return [
    {
      method: 'get',
      pattern: '/healthz',
      handler: (ctx) => send(ctx, 200, health, healthHeaders),
    },
    {
      // Ready to serve: the database answers and so does Redis when one is configured.
      method: 'get',
      pattern: '/readyz',
      handler: async (ctx) => {
        const [db, redis] = await Promise.all([
          probe(() => ping(deps.sql)),
          deps.store.kind === 'redis' ? probe(() => deps.store.ping()) : Promise.resolve('absent' as const),
        ]);
        const ok = db === 'ok' && redis !== 'failed';
        const about = { uws: binding, fast_paths: fastPaths, database: deps.dbKind, ...worker };
        sendJson(ctx, ok ? 200 : 503, ok ? { success: true, db, redis, ...about } : { success: false, error: 'Not ready', db, redis, ...about });
      },
    },
    {
      method: 'get',
      pattern: '/metrics',
      handler: async (ctx) => {
        if (!deps.metrics) return send(ctx, 404, 'metrics disabled\n', [['Content-Type', 'text/plain; charset=utf-8']]);
        const { body, contentType } = await deps.metrics.render();
        send(ctx, 200, body, [['Content-Type', contentType], ['Cache-Control', 'no-store']]);
      },
    },
    {
      method: 'get',
      pattern: '/api/v1/openapi.json',
      handler: (ctx) =>
        send(ctx, 200, OPENAPI, [
          ['Content-Type', 'application/json; charset=utf-8'],
          ['Cache-Control', 'public, max-age=3600'],
        ]),
    },
  ];
}
