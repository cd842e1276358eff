import type { Logger } from 'pino';
import { ambiguousFraming, createCtx, type Ctx } from './context.ts';
import { dropBody, holdBody } from './body-flow.ts';
import { sendError } from './reply.ts';
import type { ListenSocket, TemplatedApp, UwsBinding } from './uws.ts';
import { AppError, toAppError, type Headers } from '../errors.ts';

export type Handler = (ctx: Ctx) => void | Promise<void>;
export type Method = 'get' | 'post' | 'del' | 'head' | 'options' | 'patch' | 'put' | 'any';
export interface Route {
  readonly method: Method;
  readonly pattern: string;
  readonly handler: Handler;
  /**
   * How an /api/* request to this route is admitted before its handler runs, if not by spending one
   * request of the caller's hourly budget (the requests to a tus upload's URL are bounded per upload).
   */
  readonly admit?: Admit;
  /** Headers every reply of this route carries, admission refusals (429) included. */
  readonly replyHeaders?: Headers;
  /** Counted in the active transfers gauge while the handler runs. */
  readonly transfer?: 'upload' | 'download';
  /** A GET whose handler does something once (a one-time reveal): no implied HEAD may spend it. */
  readonly getOnly?: boolean;
  /** A web content path: spends the content budget of the client's address (its 404s the miss budget). */
  readonly content?: boolean;
  /** Which 404s of a content path spend the miss budget (default: all). */
  readonly isMiss?: (ctx: Ctx) => boolean;
  /** Writes this route's error replies (an HTML page) instead of the JSON error shape. */
  readonly renderError?: (ctx: Ctx, err: AppError) => void;
  /**
   * A refusal decided on the request line and headers alone (a body too long to ever fit): answered
   * before admission, in the same write as the 100 Continue uWS sends first, so a client that waits
   * for it (curl's Expect: 100-continue) sends none of the body. Null lets the request in.
   */
  readonly refuseEarly?: (ctx: Ctx) => AppError | null;
}

/** Resolves the caller and spends its budget (throws RATE_LIMITED), stating it in the X-RateLimit headers. */
export type Admit = (ctx: Ctx) => Promise<unknown>;

/** What the server records of the requests it runs (metrics/metrics.ts provides it). */
export interface ServerMetrics {
  /** The recorder of one mounted route: each finished request's status, duration and body bytes. */
  forRoute(route: string, method: string): (status: number, seconds: number, bytesIn: number, bytesOut: number) => void;
  trackInflight(read: () => number): void;
  transfer(kind: 'upload' | 'download', delta: 1 | -1): void;
  unanswered(): void;
  dbError(): void;
}

/** Admission of web content paths (see auth/content-budget.ts). */
export interface ContentAdmission {
  admit(ctx: Ctx): Promise<void>;
  missed(ctx: Ctx): void;
}

export interface HttpServer {
  listen(host: string, port: number): Promise<number>;
  /** Stops accepting connections; in-flight requests continue. */
  stopListening(): void;
  readonly inflight: () => number;
  /**
   * Closes the connection of every request still in flight (shutdown past its grace period): each
   * one's abort handlers run, so uploads remove their parts as if the client had gone away.
   */
  abortInflight(): number;
}

/**
 * A known path asked with a method it does not take gets 405 with `Allow` (RFC 9110 §15.5.6), not
 * the 404 of an unknown path. uWS tries a pattern's `any` handler after its method handlers.
 */
function methodNotAllowed(routes: readonly Route[]): Route[] {
  // A pattern with its own `any` route answers other methods itself.
  const own = new Set(routes.filter((r) => r.method === 'any').map((r) => r.pattern));
  const allowed = new Map<string, Set<string>>();
  for (const r of routes) {
    if (r.method === 'any' || own.has(r.pattern)) continue;
    const methods = allowed.get(r.pattern) ?? new Set<string>();
    methods.add(r.method === 'del' ? 'DELETE' : r.method.toUpperCase());
    allowed.set(r.pattern, methods);
  }
  return [...allowed].map(([pattern, methods]): Route => {
    const allow = [...methods].sort().join(', ');
    return { method: 'any', pattern, handler: (ctx) => sendError(ctx, new AppError('METHOD_NOT_ALLOWED'), false, [['Allow', allow]]) };
  });
}

/**
 * The routes as mounted: the table, a HEAD wherever there is a GET (RFC 9110 §9.3.2: same status
 * and headers, no body; `send` leaves the body out) unless the route treats HEAD itself, and a 405
 * for every other method of a known path.
 */
export function mountedRoutes(routes: readonly Route[]): Route[] {
  const heads = new Set(routes.filter((r) => r.method === 'head').map((r) => r.pattern));
  const all = routes.flatMap((r): Route[] =>
    r.method === 'get' && !r.getOnly && !heads.has(r.pattern) ? [r, { ...r, method: 'head' }] : [r],
  );
  all.push(...methodNotAllowed(all));
  return all;
}

/** An /api/* request is admitted before its handler runs; only these paths spend the API budget. */
export const isApi = (route: Route): boolean => route.pattern.startsWith('/api/');

/**
 * uWS closes a connection that stays silent for 10 s, also while its response is still being worked
 * on, and the client then gets no answer at all. A request that has been received whole and has no
 * answer this long after (a stalled database or store) gets 503 with Retry-After, in time; its work
 * goes on and ends on its own deadline (a tus client's HEAD then finds what it stored, or waits for
 * the upload's completion: tus/complete.ts).
 */
export const ANSWER_WAIT_MS = 6_000;

/**
 * Mounts the route table on a uWS app. Handlers run synchronously until their first await, so
 * body readers registered at the top of a handler see every byte (an admitted request's body is
 * held for them while admission runs). Errors become the interface's
 * JSON error shape; unexpected ones are logged with their stack.
 */
export function createHttpServer(deps: {
  binding: UwsBinding;
  routes: readonly Route[];
  log: Logger;
  /** Runs before every /api/* handler whose route has no admission of its own (rate limit, caller). */
  admit: Admit;
  /** Runs before every content route's handler; absent: content paths are not budgeted. */
  content?: ContentAdmission;
  metrics?: ServerMetrics;
}): HttpServer {
  const { binding, routes, log, admit, content, metrics } = deps;
  const app: TemplatedApp = binding.uws.App();
  let inflight = 0;
  const live = new Set<Ctx>();
  let listenSocket: ListenSocket | null = null;
  let draining = false;

  // The route pattern is logged, never the path: paths carry upload tokens (/api/v1/upload/:token).
  const fail = (ctx: Ctx, route: Route, err: unknown): void => {
    const appErr = toAppError(err);
    // A 503 is load shed on purpose (shutting down, image queue full): a warning, no stack.
    if (appErr.status === 503) log.warn({ reqId: ctx.id, route: route.pattern, reason: appErr.message }, 'request refused: unavailable');
    else if (appErr.status >= 500) log.error({ err: (err as AppError).cause ?? err, reqId: ctx.id, route: route.pattern }, 'request failed');
    if (appErr.code === 'DATABASE_ERROR') metrics?.dbError();
    if (route.renderError) route.renderError(ctx, appErr);
    else sendError(ctx, appErr);
  };
  metrics?.trackInflight(() => inflight);

  // Checked once a second, from when a request is first seen waiting: answered 5-6 s after its body ended.
  const waitingSince = new Map<Ctx, number>();
  const answerWaiting = (): void => {
    const now = performance.now();
    for (const ctx of live) {
      if (ctx.done || ctx.status !== 0 || ctx.bodyPending) {
        waitingSince.delete(ctx);
        continue;
      }
      const since = waitingSince.get(ctx);
      if (since === undefined) waitingSince.set(ctx, now);
      else if (now - since >= ANSWER_WAIT_MS - 1000) {
        waitingSince.delete(ctx);
        log.warn({ reqId: ctx.id, method: ctx.method }, 'request answered 503: no result in time (a stalled database or store?)');
        metrics?.unanswered();
        sendError(ctx, new AppError('UNAVAILABLE', 'The server is waiting on its database or file storage; please retry in a moment'), true);
      }
    }
  };
  const answerTimer = setInterval(answerWaiting, 1000);
  answerTimer.unref();

  /**
   * 503 with Connection: close. An /api/ request still counts and carries the rate-limit headers, as
   * every /api/ request does (429 once over its budget); it is in flight meanwhile, so the database
   * and Redis stay open for it. Should the caller not be resolved, it is 503 all the same.
   */
  const refuseDraining = (ctx: Ctx, admission: Admit | undefined): void => {
    const unavailable = new AppError('UNAVAILABLE');
    if (!admission) return sendError(ctx, unavailable, true);
    inflight++;
    admission(ctx)
      .then(
        () => unavailable,
        (err: unknown) => (err instanceof AppError && err.code === 'RATE_LIMITED' ? err : unavailable),
      )
      .then((err) => sendError(ctx, err, true))
      .finally(() => inflight--);
  };

  for (const route of mountedRoutes(routes)) {
    const paramCount = route.pattern.split('/').filter((s) => s.startsWith(':')).length;
    const admission = isApi(route) ? (route.admit ?? admit) : undefined;
    const admitFirst: ((ctx: Ctx) => Promise<unknown>) | undefined = admission ?? (route.content ? content?.admit : undefined);
    // Every /api/* request is admitted here, whatever its handler does, so no route can forget it.
    // The body waits meanwhile (holdBody: paused, what still arrives queued and bounded) for the handler's reader.
    const handler: Handler = admitFirst
      ? async (ctx) => {
          // A GET or HEAD without a body has nothing to hold (the common case: no onData for it).
          if (ctx.bodyPending || (ctx.method !== 'get' && ctx.method !== 'head')) holdBody(ctx);
          const caller = await admitFirst(ctx);
          if (admission) ctx.caller = caller;
          // Gone meanwhile: nobody to answer, and a body reader must not touch the aborted response.
          if (ctx.done) return;
          try {
            await route.handler(ctx);
          } finally {
            // Whatever of the body is still queued, nobody reads now.
            dropBody(ctx);
          }
        }
      : route.handler;
    const missed = route.content ? content?.missed : undefined;
    const record = metrics?.forRoute(route.pattern, route.method);
    app[route.method](route.pattern, (res, req) => {
      const ctx = createCtx(res, req, paramCount);
      // Refused before anything reads the body, with the connection closed at once. The answer
      // waits for the next turn of the loop: if another request is pipelined behind this one, uWS
      // finds this one unanswered and closes the connection without parsing it; if not, the answer
      // is written outside uWS's cork, so it is sent and the socket closed right away.
      if (ambiguousFraming(ctx.headers)) {
        ctx.bodyPending = false;
        setImmediate(() => sendError(ctx, new AppError('AMBIGUOUS_FRAMING'), true));
        return;
      }
      for (const [k, v] of route.replyHeaders ?? []) ctx.replyHeaders.push([k, v]);
      const early = route.refuseEarly?.(ctx);
      if (early) return sendError(ctx, early, true);
      // Draining: a new request on a kept-alive connection is refused and the connection closed, so
      // the client retries elsewhere (or after the restart) instead of starting what will be cut.
      if (draining) return refuseDraining(ctx, admission);
      const started = record ? performance.now() : 0;
      inflight++;
      live.add(ctx);
      if (route.transfer) metrics?.transfer(route.transfer, 1);
      let settled = false;
      const settle = (): void => {
        if (settled) return;
        settled = true;
        inflight--;
        live.delete(ctx);
        waitingSince.delete(ctx);
        if (route.transfer) metrics?.transfer(route.transfer, -1);
        if (missed && ctx.status === 404 && (route.isMiss?.(ctx) ?? true)) missed(ctx);
        if (record) {
          // Content-Length as sent: an approximation for bodies the client abandoned part-way.
          const bytesIn = Number(ctx.headers['content-length']) || 0;
          record(ctx.status, (performance.now() - started) / 1000, bytesIn, ctx.bytesOut);
        }
      };
      let result: void | Promise<void>;
      try {
        result = handler(ctx);
      } catch (err) {
        fail(ctx, route, err);
        settle();
        return;
      }
      if (result instanceof Promise) {
        result.then(settle, (err: unknown) => {
          fail(ctx, route, err);
          settle();
        });
      } else settle();
    });
  }

  return {
    listen: (host, port) =>
      new Promise((resolve, reject) => {
        app.listen(host, port, (sock) => {
          if (!sock) return reject(new Error(`cannot listen on ${host}:${port}`));
          listenSocket = sock;
          resolve(binding.uws.us_socket_local_port(sock));
        });
      }),
    stopListening: () => {
      if (listenSocket) binding.uws.us_listen_socket_close(listenSocket);
      listenSocket = null;
      draining = true;
    },
    inflight: () => inflight,
    abortInflight() {
      let n = 0;
      for (const ctx of live) {
        if (ctx.done) continue;
        n++;
        // uWS runs the response's onAborted handler from close().
        ctx.res.close();
      }
      return n;
    },
  };
}
