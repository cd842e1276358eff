import { rm } from 'node:fs/promises';
import type { Sql } from '../db/client.ts';
import { AppError } from '../errors.ts';
import type { Inspector } from './inspector.ts';

/**
 * The abuse checks of a finished tus upload, before its part becomes a file. A refused file (422)
 * leaves nothing: its part and its upload are removed, so later requests to it answer 404. An
 * unreachable scanner (503) keeps both: a PATCH at the final offset retries the completion.
 */
export async function inspectTusPart(deps: { sql: Sql; inspector?: Inspector }, uploadId: string, partPath: string): Promise<void> {
  if (!deps.inspector) return;
  try {
    await deps.inspector.checkFile(partPath);
  } catch (err) {
    if (err instanceof AppError && err.status === 422) {
      await rm(partPath, { force: true });
      await deps.sql`delete from tus_uploads where id = ${uploadId}`;
    }
    throw err;
  }
}
