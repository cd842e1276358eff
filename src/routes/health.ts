import { readFileSync } from 'node:fs';
import { sendJson, send } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import type { Deps } from './deps.ts';

const OPENAPI = readFileSync(new URL('../openapi.json', import.meta.url));

export function healthRoutes(deps: Deps): Route[] {
  const binding = { package: deps.binding.name, version: deps.binding.version, limits: deps.binding.limits };
  return [
    {
      method: 'get',
      pattern: '/healthz',
      handler: (ctx) => sendJson(ctx, 200, { success: true, uws: binding, database: deps.dbKind }),
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
