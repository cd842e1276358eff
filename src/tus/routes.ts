import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import type { Deps } from '../routes/deps.ts';
import { PLANS } from '../auth/plans.ts';
import { hasBody } from './body.ts';
import { createUpload } from './create.ts';
import { admitToUpload, head, logFailure, notFound, patch, serveFinished, terminate } from './session.ts';
import { CHECKSUM_ALGORITHMS, replyError, TUS_EXTENSIONS, TUS_HEADERS, TUS_VERSION, TusError } from './protocol.ts';

type Handler = (ctx: Ctx) => Promise<void>;

/**
 * tus 1.0.0 at /api/v1/tus/. Every route reads the body itself or has none to read, so each admits
 * its caller itself. A creation spends one request of the caller's hourly budget, a termination
 * one more; the requests to an upload's URL (PATCH, HEAD, OPTIONS, GET) are bounded per upload
 * instead (session.ts), so a chunked or often-resumed upload never runs out of budget. PATCH,
 * HEAD, GET and DELETE are authorized by the unguessable upload id; a PATCH of an upload started
 * under a key also needs that key still active.
 *
 * Each request is dispatched on its X-HTTP-Method-Override when it carries one (the protocol: the
 * actual method MUST then be ignored), and every answer carries Tus-Resumable, 405s included.
 */
export function tusRoutes(deps: Deps): Route[] {
  const options = (upload: boolean): Handler => async (ctx) => {
    try {
      if (upload) {
        if (!(await admitToUpload(ctx, deps))) throw notFound();
      } else await deps.access.admit(ctx);
    } catch (err) {
      return replyError(ctx, err, logFailure(deps, ctx));
    }
    const maxSize = Math.max(deps.config.anonMaxBundleBytes, ...Object.values(PLANS).map((p) => p.maxBundleBytes));
    send(ctx, 204, '', [
      ['Tus-Version', TUS_VERSION],
      ['Tus-Extension', TUS_EXTENSIONS],
      ['Tus-Max-Size', String(maxSize)],
      ['Tus-Checksum-Algorithm', CHECKSUM_ALGORITHMS.join(',')],
    ]);
  };
  const onCollection: Record<string, Handler> = {
    OPTIONS: options(false),
    POST: (ctx) => createUpload(ctx, deps),
  };
  const onUpload: Record<string, Handler> = {
    OPTIONS: options(true),
    HEAD: (ctx) => head(ctx, deps),
    PATCH: (ctx) => patch(ctx, deps),
    DELETE: (ctx) => terminate(ctx, deps),
    GET: (ctx) => serveFinished(ctx, deps),
  };
  const routes: Route[] = [];
  const mount = (pattern: string, table: Record<string, Handler>): void => {
    const dispatch = dispatcher(deps, table);
    for (const m of Object.keys(table)) {
      const method = m === 'DELETE' ? 'del' : (m.toLowerCase() as Route['method']);
      const transfer = m === 'PATCH' ? 'upload' : m === 'GET' ? 'download' : undefined;
      routes.push({ method, pattern, streamsBody: true, transfer, handler: dispatch });
    }
    // Any other method: 405 with Allow (or what its override names).
    routes.push({ method: 'any', pattern, streamsBody: true, handler: dispatch });
  };
  mount('/api/v1/tus', onCollection);
  mount('/api/v1/tus/', onCollection);
  mount('/api/v1/tus/:id', onUpload);
  return routes;
}

/**
 * Runs the handler of the request's method: X-HTTP-Method-Override if present, else the actual one.
 * Synchronous up to the handler's own first await, so a body reader it registers sees every byte.
 */
function dispatcher(deps: Deps, table: Record<string, Handler>): Handler {
  const allow = Object.keys(table).sort().join(', ');
  return (ctx) => {
    for (const [k, v] of TUS_HEADERS) ctx.replyHeaders.push([k, v]);
    const override = ctx.headers['x-http-method-override']?.trim().toUpperCase();
    const method = override || ctx.method.toUpperCase();
    const handler = table[method];
    if (handler) return handler(ctx);
    return notAllowed(ctx, deps, allow);
  };
}

async function notAllowed(ctx: Ctx, deps: Deps, allow: string): Promise<void> {
  const withBody = hasBody(ctx.headers);
  try {
    await deps.access.admit(ctx);
    throw new TusError(405, 'METHOD_NOT_ALLOWED', 'This endpoint does not take that method: see the Allow header', [['Allow', allow]]);
  } catch (err) {
    replyError(ctx, err, logFailure(deps, ctx), withBody);
  }
}
