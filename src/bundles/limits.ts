import { createHash } from 'node:crypto';
import { admitDownload, creditDownload, type FilePiece } from '../db/download-sessions.ts';
import { AppError } from '../errors.ts';
import type { Ctx } from '../http/context.ts';
import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import type { BundleCache } from '../state/bundle-cache.ts';
import type { Access } from '../auth/caller.ts';
import type { ZipLayout } from '../zip/layout.ts';
import type { BodySource } from '../http/body-pump.ts';

export type { FilePiece };

/**
 * Download limits (`max_downloads`): each file of the bundle can be downloaded in full that many
 * times. The rule, kept in PostgreSQL so every process and node applies it alike:
 *
 * - A download is a session: the bytes of the file sent to one client (its address and user
 *   agent) so far, and the ranges responses are sending it now. A GET joins the client's session
 *   (a resume, another parallel segment, a zip reaching the file) unless a range in flight there
 *   starts where it starts: that is the same bytes asked twice at once, another download, and it
 *   starts a session of its own. (A resume starts past where the cut response started, so it
 *   joins even while the server has not yet noticed that the cut response's client is gone.) A
 *   new session takes one of the file's downloads, and only while one is left: live sessions plus complete downloads never pass the limit, so clients racing for the
 *   last download get it exactly once, even from one address with one user agent. HEAD takes nothing.
 * - Every response, whole or cut, adds what it sent to its session. The download counts when the
 *   session has been sent nearly every byte of the file (all but its 64th, at most 64 KiB), or as
 *   many bytes as the file holds, whichever ranges they were; the session then ends. A response is
 *   credited just before its last read, so the count is committed before its last bytes go out.
 * - A limited file has no preview (thumbs/previewable.ts): a preview is a copy no limit counts.
 * - A session untouched for a while (SESSION_LEASE in db/download-sessions.ts) gives its download back.
 * - When a file's downloads are all counted, the file is deleted (404 on every path, like an
 *   expired one); when that was the bundle's last file, the bundle expires.
 *
 * Every step runs under the bundle's row lock, the order deletes and appends take, so the counts
 * are race-free.
 */
/** Pauses before a refusal is final (see limitedResponse). */
const RETRY_MS = [100, 300, 600, 1000];

/** Who downloads: the same person's parallel segments and resumes share one session. */
export const clientOf = (ip: string, userAgent: string | undefined): Buffer =>
  createHash('sha256').update(`${ip}\0${userAgent ?? ''}`).digest();

/** `max_downloads` as sent at upload ('' or absent: no limit); INVALID_MAX_DOWNLOADS otherwise. */
export function parseMaxDownloads(raw: string | undefined): number | null {
  if (raw === undefined || raw === '') return null;
  if (!/^[1-9]\d{0,3}$/.test(raw) || Number(raw) > 1000) throw new AppError('INVALID_MAX_DOWNLOADS');
  return Number(raw);
}

/**
 * A listed file as answers show it: `downloads_done` is internal; `downloads_remaining` is added
 * only in a limited bundle, so the interface's answers keep exactly their fields otherwise.
 */
export function fileWithRemaining<F extends { downloads_done: number }>(f: F, max: number | null): Omit<F, 'downloads_done'> & { downloads_remaining?: number } {
  const { downloads_done, ...rest } = f;
  return max === null ? rest : { ...rest, downloads_remaining: Math.max(0, max - downloads_done) };
}

/** `max_downloads` for a bundle answer: present only when the bundle has a limit. */
export const limitJson = (max: number | null): { max_downloads?: number } => (max === null ? {} : { max_downloads: max });

/** What a response of a limited bundle does once its bytes went out. */
export interface LimitedResponse {
  /**
   * Wraps the response's body source of `length` bytes so that everything it was admitted for is
   * credited as sent just before its last read: the count is committed before the last bytes go
   * out, so the client's next request already sees it (read-your-writes).
   */
  wrap(length: number): (source: BodySource) => BodySource;
  /** Credits what the response sent of each file (whole or cut), unless wrap() did; never throws. */
  credit(sent: readonly FilePiece[]): Promise<void>;
}

/**
 * The hook the byte-sending paths call for a GET of a limited bundle, before the first byte: the
 * client's session of every file the response will carry (FILE_NOT_FOUND when one has no download
 * left). Its `credit` is called once the response ended (and removes the bytes of a file that
 * reached its limit); a failure to credit is logged (the bytes are out already).
 */
/** What limitedResponse works with (the server's wiring provides all of it). */
export interface LimitDeps {
  readonly sql: Sql;
  readonly log: Logger;
  readonly blobs: BlobStore;
  readonly bundles: BundleCache;
  readonly access: Pick<Access, 'ipOf'>;
}

export async function limitedResponse(deps: LimitDeps, ctx: Ctx, bundleId: number, asked: readonly FilePiece[]): Promise<LimitedResponse> {
  const client = clientOf(deps.access.ipOf(ctx), ctx.headers['user-agent']);
  let sessions = await admitDownload(deps.sql, bundleId, asked, client);
  // A client that cut a response and asks again from the same byte at once (aria2c, a browser's
  // retry) may find the cut response still in flight for a moment: it is given a little time to end.
  for (const ms of RETRY_MS) {
    if (sessions !== null || ctx.aborted) break;
    await new Promise((r) => setTimeout(r, ms));
    sessions = await admitDownload(deps.sql, bundleId, asked, client);
  }
  if (sessions === null) throw new AppError('FILE_NOT_FOUND');
  let credited = false;
  let gone: string[] = [];
  const commit = async (sent: readonly FilePiece[]): Promise<void> => {
    credited = true;
    try {
      const done = await creditDownload(deps.sql, bundleId, sessions, asked, sent);
      // Cached bundle info drops; a file at its limit has no row any more.
      if (done.counted) deps.bundles.invalidate(bundleId);
      gone = done.gone;
    } catch (err) {
      deps.log.error({ err, reqId: ctx.id }, 'download not credited');
    }
  };
  return {
    async credit(sent) {
      if (!credited) await commit(sent);
      // The bytes of a file at its limit go once this response no longer reads them.
      for (const key of gone.splice(0)) {
        void deps.blobs.delete(key).catch((err: unknown) => deps.log.warn({ err }, 'file at its download limit not removed'));
      }
    },
    wrap: (length) => (source) => ({
      async read(target, pos) {
        if (!credited && pos + target.length >= length) await commit(asked);
        return source.read(target, pos);
      },
      close: () => source.close(),
    }),
  };
}

/** The bytes [from, to) of a zip archive as pieces of the files whose data they carry. */
export function zipPieces(layout: ZipLayout, files: readonly { id: number }[], from: number, to: number): FilePiece[] {
  const out: FilePiece[] = [];
  for (const s of layout.segments) {
    if (s.kind !== 'file' || s.start >= to) continue;
    const a = Math.max(from, s.start);
    const b = Math.min(to, s.start + s.length);
    if (a < b) out.push({ fileId: files[s.index]!.id, from: s.offset + a - s.start, to: s.offset + b - s.start });
  }
  return out;
}
