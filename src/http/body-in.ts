import { onBody } from './body-flow.ts';
import type { Ctx } from './context.ts';
import { AppError } from '../errors.ts';

/**
 * Collects a small request body (JSON or form) up to `limit` bytes. Call before the handler's
 * first await; past the limit it rejects with 413 and stops collecting.
 */
export function readSmallBody(ctx: Ctx, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    ctx.onAbort(() => reject(new AppError('INVALID_FIELD', 'client aborted')));
    onBody(ctx, (chunk, isLast) => {
      if (over) return;
      size += chunk.length;
      if (size > limit) {
        over = true;
        return reject(new AppError('PAYLOAD_TOO_LARGE'));
      }
      chunks.push(Buffer.from(chunk)); // a copy: the chunk's memory is reused
      if (isLast) resolve(Buffer.concat(chunks));
    }, true);
  });
}

/** A small JSON body that must be an object (an empty body is `{}`); anything else is INVALID_JSON. */
export async function jsonObject(body: Promise<Buffer>): Promise<Record<string, unknown>> {
  const text = (await body).toString('utf8');
  let v: unknown;
  try {
    v = text.trim() === '' ? {} : JSON.parse(text);
  } catch {
    throw new AppError('INVALID_JSON');
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new AppError('INVALID_JSON');
  return v as Record<string, unknown>;
}
