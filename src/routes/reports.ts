import type { Ctx } from '../http/context.ts';
import { send, sendError, sendJson } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { readSmallBody } from '../http/body-in.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import { AppError } from '../errors.ts';
import { SHORT_CODE_RE } from '../util/tokens.ts';
import { bundleByCode, insertReport } from '../db/abuse.ts';
import { reportInput, reporterHash } from '../abuse/reports.ts';
import { loadAssets } from '../web/assets.ts';
import { SECURITY_HEADERS, sendHtml } from '../web/html.ts';
import { notFoundPage, requestView } from '../web/views.ts';
import { reportPage } from '../web/report-views.ts';
import type { Deps } from '../deps.ts';
import { parseFields } from './verify-access.ts';

/** Reports per client address and hour (an IPv6 client counts as its /64), beside the API budget. */
export const REPORTS_PER_HOUR = 10;
const HOUR_MS = 3_600_000;
/** Room for 4000 characters of details in any encoding a form may use, and nothing like a file. */
const MAX_BODY = 128 * 1024;

export interface ReportDeps {
  /** Keys the hash of a reporter's address (the address itself is never stored). */
  readonly secret: Buffer;
  /** Called after a report is stored (the mail to ABUSE_EMAIL goes out soon after, batched). */
  readonly reported?: () => void;
}

/**
 * POST /api/v1/reports (JSON, or the report page's form) and GET /report/<code> (the form). A
 * report needs an existing bundle (expired or held ones included: the record matters most then).
 */
export function reportRoutes(deps: Deps & ReportDeps): Route[] {
  const assets = loadAssets();
  const isForm = (ctx: Ctx): boolean => !/^application\/json\b/i.test(ctx.headers['content-type'] ?? '');
  // The form's refusals come back as the form with the message; API clients get the JSON shape.
  const codes = new WeakMap<Ctx, string>();
  const renderError = (ctx: Ctx, err: AppError): void => {
    const code = codes.get(ctx);
    if (!isForm(ctx) || code === undefined) return sendError(ctx, err);
    sendHtml(ctx, err.status, reportPage(requestView(assets, deps.origin(ctx)), code, { error: err.message }), 'no-store');
  };
  const page = async (ctx: Ctx): Promise<void> => {
    const code = ctx.params[0] ?? '';
    const view = requestView(assets, deps.origin(ctx));
    if (!SHORT_CODE_RE.test(code) || !(await bundleByCode(deps.sql, code))) return sendHtml(ctx, 404, notFoundPage(view));
    sendHtml(ctx, 200, reportPage(view, code, { sent: ctx.query.has('sent') }), 'no-store');
  };
  return [
    { method: 'post', pattern: '/api/v1/reports', renderError, handler: (ctx) => report(ctx, deps, isForm(ctx), codes) },
    { method: 'get', pattern: '/report/:code', content: true, handler: page },
    { method: 'head', pattern: '/report/:code', content: true, handler: page },
  ];
}

async function report(ctx: Ctx, deps: Deps & ReportDeps, form: boolean, codes: WeakMap<Ctx, string>): Promise<void> {
  const body = readSmallBody(ctx, MAX_BODY);
  body.catch(() => {}); // awaited below; if a check throws first, its rejection is moot
  const caller = await deps.access.callerOf(ctx);
  refuseOtherSite(ctx, deps.origin(ctx));
  // Its own budget beside the API's (which the server spent on admission), spent by every report
  // whatever its fate: a storm stops here. Fails open with the store.
  const hit = await deps.store.hit(`report:${caller.ip}`, HOUR_MS).catch(() => null);
  if (hit && hit.count > REPORTS_PER_HOUR) {
    ctx.replyHeaders.push(['Retry-After', String(Math.max(1, Math.ceil(hit.resetMs / 1000)))]);
    throw new AppError('RATE_LIMITED', `At most ${REPORTS_PER_HOUR} reports an hour from one address; try again later`);
  }
  const fields = await parseFields(ctx.headers['content-type'] ?? '', await body, MAX_BODY);
  const code = fields.short_code;
  if (typeof code !== 'string' || code === '') throw new AppError('INVALID_FIELD', 'short_code is required');
  if (!SHORT_CODE_RE.test(code)) throw new AppError('INVALID_SHORT_CODE');
  codes.set(ctx, code); // the form's error page (renderError) shows the form for this bundle again
  const input = reportInput(fields);
  if (!(await bundleByCode(deps.sql, code))) throw new AppError('BUNDLE_NOT_FOUND');
  const id = await insertReport(deps.sql, { shortCode: code, ...input }, reporterHash(deps.secret, caller.ip));
  deps.log.info({ reportId: id, shortCode: code, reason: input.reason }, 'abuse report received');
  deps.reported?.();
  if (form) return send(ctx, 303, '', [['Location', `/report/${code}?sent=${id}`], ['Cache-Control', 'no-store'], ...SECURITY_HEADERS]);
  sendJson(ctx, 201, { success: true, report_id: id });
}
