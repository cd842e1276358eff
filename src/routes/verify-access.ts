import busboy from 'busboy';
import type { Ctx } from '../http/context.ts';
import { sendJson } from '../http/reply.ts';
import type { Route } from '../http/server.ts';
import { readSmallBody } from '../http/body-in.ts';
import { refuseOtherSite } from '../http/cross-site.ts';
import { AppError } from '../errors.ts';
import { findActiveBundle } from '../db/bundles.ts';
import { SHORT_CODE_RE } from '../util/tokens.ts';
import type { Deps } from '../deps.ts';

/** Wrong passwords allowed per bundle and client IP in 15 minutes before 429. */
const MAX_WRONG = 10;
const WINDOW_MS = 15 * 60_000;

export function verifyAccessRoutes(deps: Deps): Route[] {
  return [{ method: 'post', pattern: '/api/verify-access', handler: (ctx) => verify(ctx, deps) }];
}

async function verify(ctx: Ctx, deps: Deps): Promise<void> {
  const body = readSmallBody(ctx, 16 * 1024);
  body.catch(() => {}); // awaited below; if the origin check throws first, its rejection is moot
  const caller = await deps.access.callerOf(ctx);
  refuseOtherSite(ctx, deps.origin(ctx));
  const fields = await parseFields(ctx.headers['content-type'] ?? '', await body);
  const code = fields.short_code ?? fields.code;
  const password = fields.password ?? fields.access_password;
  if (typeof code !== 'string' || typeof password !== 'string' || code === '' || password === '') {
    throw new AppError('INVALID_FIELD', 'short_code and password are required');
  }
  if (!SHORT_CODE_RE.test(code)) throw new AppError('INVALID_SHORT_CODE');
  const bundle = await findActiveBundle(deps.sql, code);
  if (!bundle) throw new AppError('BUNDLE_NOT_FOUND');
  // Keyed by the bundle's token hash, never reused, unlike ids and codes after a delete or a fresh db.
  const attemptsKey = `pw:${Buffer.from(bundle.upload_token_hash).subarray(0, 12).toString('hex')}:${caller.ip}`;
  // The attempt is counted before the password is checked, in one atomic hit, and given back when
  // it was right: with a read first and a hit after the (slow) check, guesses sent at once would all
  // read a count below the limit and all be tried. If the store cannot answer, verification
  // fails open like the rest of the rate limiting.
  const attempt = await deps.store.hit(attemptsKey, WINDOW_MS).catch(() => null);
  const giveBack = (): Promise<void> => (attempt ? deps.store.undo(attemptsKey).catch(() => {}) : Promise.resolve());
  if (attempt && attempt.count > MAX_WRONG) {
    await giveBack(); // refused untried: only tried passwords fill the window
    ctx.replyHeaders.push(['Retry-After', String(Math.max(1, Math.ceil(attempt.resetMs / 1000)))]);
    throw new AppError('RATE_LIMITED', 'Too many wrong passwords for this bundle; try again later');
  }
  const ok = bundle.access_password_hash === null || (await deps.passwords.verify(password, bundle.access_password_hash));
  if (!ok) throw new AppError('WRONG_PASSWORD');
  await giveBack();
  const { token, expiresAt } = deps.signer.accessToken(bundle.id, caller.ip);
  // The description is the locked share page's too: shown once the password was given.
  sendJson(ctx, 200, {
    success: true, access_token: token, short_code: bundle.short_code, expires_in: 3600, expires_at: expiresAt, description: bundle.description,
  });
}

/**
 * JSON, an urlencoded form, or a multipart form (`curl -F`, an HTML form with enctype multipart).
 * `fieldSize`: the bytes a multipart text field may hold.
 */
export async function parseFields(contentType: string, body: Buffer, fieldSize = 4096): Promise<Record<string, unknown>> {
  const type = contentType.split(';')[0]!.trim().toLowerCase();
  if (type === 'application/json') {
    try {
      const v: unknown = JSON.parse(body.toString('utf8'));
      if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
    } catch {
      // fall through
    }
    throw new AppError('INVALID_FIELD', 'Body is not a JSON object');
  }
  if (type === 'application/x-www-form-urlencoded' || type === '') {
    return Object.fromEntries(new URLSearchParams(body.toString('utf8')));
  }
  if (type === 'multipart/form-data') return multipartFields(contentType, body, fieldSize);
  throw new AppError('INVALID_FIELD', 'Send JSON or a form (urlencoded or multipart)');
}

/** The text fields of a whole (small, already read) multipart body; file parts are skipped. */
function multipartFields(contentType: string, body: Buffer, fieldSize: number): Promise<Record<string, string>> {
  const malformed = (): AppError => new AppError('INVALID_FIELD', 'Malformed multipart form');
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({ headers: { 'content-type': contentType }, limits: { fields: 16, fieldSize, files: 0 }, defParamCharset: 'utf8' });
    } catch {
      return reject(malformed()); // no boundary
    }
    const fields: Record<string, string> = {};
    bb.on('field', (name, value) => {
      fields[name] = value;
    });
    bb.on('file', (_name, stream) => stream.resume());
    bb.on('error', () => reject(malformed()));
    bb.on('close', () => resolve(fields));
    bb.end(body);
  });
}
