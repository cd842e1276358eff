import type { Ctx } from '../http/context.ts';
import { send } from '../http/reply.ts';
import type { Admit, Route } from '../http/server.ts';
import type { Deps } from '../deps.ts';
import { PLANS } from '../plans.ts';
import { hasBody } from './body.ts';
import { createUpload } from './create.ts';
import { admitToUpload, head, logFailure, notFound, patch, serveFinished, terminate, uploadOf } from './session.ts';
import { CHECKSUM_ALGORITHMS, replyError, TUS_EXTENSIONS, TUS_HEADERS, TUS_VERSION } from './protocol.ts';
import { AppError } from '../errors.ts';

type Handler = (ctx: Ctx) => Promise<void>;

/**
 * tus 1.0.0 at /api/v1/tus/. The server admits every request before its handler runs (holding the
 * body meanwhile): a creation spends one request of the caller's hourly budget, a termination one
 * more; the requests to a live upload's URL (PATCH, HEAD, OPTIONS, GET) are bounded per upload
 * instead (session.ts admitToUpload), so a chunked or often-resumed upload never runs out of
 * budget. PATCH, HEAD, GET and DELETE are authorized by the unguessable upload id; a PATCH of an
 * upload started under a key also needs that key still active.
 *
 * Each request is dispatched on its X-HTTP-Method-Override when it carries one (the protocol: the
 * actual method MUST then be ignored), and every answer carries Tus-Resumable, 405s included.
 */
export function tusRoutes(deps: Deps): Route[] {
  const options = (upload: boolean): Handler => async (ctx) => {
    if (upload && !uploadOf(ctx)) return replyError(ctx, notFound(), logFailure(deps, ctx));
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
  // Termination and methods the URL does not take spend the hourly budget like any API request.
  const admitToUrl: Admit = (ctx) => {
    const method = methodOf(ctx);
    return method !== 'DELETE' && Object.hasOwn(onUpload, method) ? admitToUpload(ctx, deps, method === 'PATCH') : deps.access.admit(ctx);
  };
  const routes: Route[] = [];
  const mount = (pattern: string, table: Record<string, Handler>, admit?: Admit): void => {
    const dispatch = dispatcher(deps, table);
    for (const m of Object.keys(table)) {
      const method = m === 'DELETE' ? 'del' : (m.toLowerCase() as Route['method']);
      const transfer = m === 'PATCH' ? 'upload' : m === 'GET' ? 'download' : undefined;
      routes.push({ method, pattern, admit, replyHeaders: TUS_HEADERS, transfer, handler: dispatch });
    }
    // Any other method: 405 with Allow (or what its override names).
    routes.push({ method: 'any', pattern, admit, replyHeaders: TUS_HEADERS, handler: dispatch });
  };
  mount('/api/v1/tus', onCollection);
  mount('/api/v1/tus/', onCollection);
  mount('/api/v1/tus/:id', onUpload, admitToUrl);
  return routes;
}

/** The method a tus request asks for: X-HTTP-Method-Override if present, else the actual one. */
const methodOf = (ctx: Ctx): string => ctx.headers['x-http-method-override']?.trim().toUpperCase() || ctx.method.toUpperCase();

/** Runs the handler of the request's method. */
function dispatcher(deps: Deps, table: Record<string, Handler>): Handler {
  const allow = Object.keys(table).sort().join(', ');
  return (ctx) => {
    const handler = table[methodOf(ctx)];
    if (handler) return handler(ctx);
    const refused = new AppError('METHOD_NOT_ALLOWED', undefined, { headers: [['Allow', allow]] });
    replyError(ctx, refused, logFailure(deps, ctx), hasBody(ctx.headers));
    return Promise.resolve();
  };
}
