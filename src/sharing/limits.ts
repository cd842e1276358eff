import { createHash } from 'node:crypto';
import type { Sql } from '../db/client.ts';
import { AppError } from '../errors.ts';
import type { Ctx } from '../http/context.ts';
import type { Deps } from '../routes/deps.ts';
import type { ZipLayout } from '../zip/layout.ts';

/**
 * Download limits (`max_downloads`): each file of the bundle can be downloaded in full that many
 * times. The rule, kept in PostgreSQL so every process and node applies it alike:
 *
 * - A download is a session: the bytes of the file sent to one client (its address and user
 *   agent) so far, and the ranges responses are sending it now. A GET joins the client's session
 *   (a resume, another parallel segment, a zip reaching the file) unless a range in flight there
 *   starts where it starts: that is the same bytes asked twice at once, another download, and it
 *   starts a session of its own. (A resume starts past where the cut response started, so it
 *   joins even while the server has not yet noticed that the cut response's client is gone.) A new session takes one of the file's downloads, and only while one is
 *   left: live sessions plus complete downloads never pass the limit, so clients racing for the
 *   last download get it exactly once, even from one address with one user agent. HEAD takes nothing.
 * - Every response, whole or cut, adds what it sent to its session. The download counts when the
 *   session has been sent every byte of the file (or twice the file's size: a client that never
 *   asks for some byte cannot keep it forever); the session then ends.
 * - A session untouched for SESSION_LEASE gives its download back.
 * - When a file's downloads are all counted, the file is deleted (404 on every path, like an
 *   expired one); when that was the bundle's last file, the bundle expires.
 *
 * Every step runs under the bundle's row lock, the order deletes and appends take, so the counts
 * are race-free.
 */
const SESSION_LEASE = '6 hours';
/** Pauses before a refusal is final (see limitedResponse). */
const RETRY_MS = [100, 300, 600, 1000];

/** Who downloads: the same person's parallel segments and resumes share one session. */
export const clientOf = (ip: string, userAgent: string | undefined): Buffer =>
  createHash('sha256').update(`${ip}\0${userAgent ?? ''}`).digest();

/** A piece of one file a response sends: bytes [from, to) of the file. */
export interface FilePiece {
  readonly fileId: number;
  readonly from: number;
  readonly to: number;
}

export interface LimitDeps {
  readonly sql: Sql;
  /** Called after downloads were counted: cached bundle info drops. */
  readonly counted: (bundleId: number) => void;
  /** Called after a file reached its limit and its row was deleted: its bytes go. */
  readonly exhausted: (storageKey: string) => void;
}

/** Thrown inside the transaction to undo sessions already joined when a later file has none left. */
class NoneLeft extends Error {}

/**
 * Joins or starts this client's session for each piece, all or none: the session ids by file id,
 * or null when a file has no download left. Bundles without a limit return an empty map.
 */
export async function admitDownload(deps: LimitDeps, bundleId: number, pieces: readonly FilePiece[], client: Buffer): Promise<Map<number, number> | null> {
  const ids = pieces.map((p) => p.fileId);
  try {
    return (await deps.sql.begin(async (tx) => {
      const sessions = new Map<number, number>();
      const [b] = await tx<{ max_downloads: number | null }[]>`select max_downloads from bundles where id = ${bundleId} for update`;
      if (!b || b.max_downloads === null || pieces.length === 0) return sessions;
      await tx`delete from download_sessions where file_id = any(${ids}) and touched_at <= now() - ${SESSION_LEASE}::interval`;
      for (const p of pieces) {
        const range = tx`int8multirange(int8range(${p.from}, ${p.to}))`;
        const [joined] = await tx<{ id: number }[]>`
          update download_sessions set inflight = inflight + ${range}, touched_at = now()
          where id = (select id from download_sessions
                      where file_id = ${p.fileId} and client = ${client}
                        and not exists (select 1 from unnest(inflight) r where lower(r) = ${p.from})
                      order by id limit 1)
          returning id`;
        if (joined) {
          sessions.set(p.fileId, joined.id);
          continue;
        }
        const [started] = await tx<{ id: number }[]>`
          insert into download_sessions (file_id, client, inflight)
          select f.id, ${client}, ${range} from files f
          where f.id = ${p.fileId} and f.bundle_id = ${bundleId}
            and f.downloads_done + (select count(*) from download_sessions s where s.file_id = f.id) < ${b.max_downloads}
          returning id`;
        if (!started) throw new NoneLeft();
        sessions.set(p.fileId, started.id);
      }
      return sessions;
    })) as Map<number, number>;
  } catch (err) {
    if (err instanceof NoneLeft) return null;
    throw err;
  }
}

/**
 * Credits a response's pieces to their sessions: `asked` is what it was admitted for, `sent` what
 * went out of it. Counts and ends each session that has then been sent the whole file, and deletes
 * a file whose downloads are then all counted.
 */
export async function creditDownload(
  deps: LimitDeps,
  bundleId: number,
  sessions: ReadonlyMap<number, number>,
  asked: readonly FilePiece[],
  sent: readonly FilePiece[],
): Promise<void> {
  if (sessions.size === 0) return;
  const sentOf = new Map(sent.map((p) => [p.fileId, p]));
  let counted = false;
  const gone = await deps.sql.begin(async (tx) => {
    counted = false; // (a retried transaction starts over)
    const [b] = await tx<{ max_downloads: number | null }[]>`select max_downloads from bundles where id = ${bundleId} for update`;
    if (!b || b.max_downloads === null) return [];
    const out: string[] = [];
    for (const p of asked) {
      const id = sessions.get(p.fileId);
      if (id === undefined) continue;
      const s = sentOf.get(p.fileId);
      const [from, to] = s ? [s.from, Math.max(s.from, s.to)] : [p.from, p.from];
      const [row] = await tx<{ whole: boolean }[]>`
        update download_sessions d
        set inflight = d.inflight - int8multirange(int8range(${p.from}, ${p.to})),
            covered = d.covered + int8multirange(int8range(${from}, ${to})),
            sent = d.sent + ${to - from}, touched_at = now()
        from files f
        where d.id = ${id} and f.id = d.file_id
        returning d.covered @> int8range(0, f.size) or d.sent >= 2 * f.size as whole`; // (RETURNING sees the row as updated)
      if (!row?.whole) continue;
      await tx`delete from download_sessions where id = ${id}`;
      counted = true;
      const [f] = await tx<{ done: number }[]>`
        update files set downloads_done = downloads_done + 1 where id = ${p.fileId} returning downloads_done as done`;
      if (f && f.done >= b.max_downloads) {
        const [d] = await tx<{ storage_key: string; size: number }[]>`delete from files where id = ${p.fileId} returning storage_key, size`;
        if (!d) continue;
        // The last file gone: the bundle expires (the sweeper removes it).
        await tx`update bundles set total_size_bytes = total_size_bytes - ${d.size}, file_count = file_count - 1,
                   expires_at = case when file_count = 1 then now() else expires_at end
                 where id = ${bundleId}`;
        out.push(d.storage_key);
      }
    }
    return out;
  });
  if (counted) deps.counted(bundleId);
  for (const key of gone as string[]) deps.exhausted(key);
}

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
  /** Credits what the response sent of each file (whole or cut); never throws. */
  credit(sent: readonly FilePiece[]): Promise<void>;
}

/**
 * The hook the byte-sending paths call for a GET of a limited bundle, before the first byte: the
 * client's session of every file the response will carry (FILE_NOT_FOUND when one has no download
 * left). Its `credit` is called once the response ended; a failure to credit is logged (the bytes
 * are out already).
 */
export async function limitedResponse(deps: Deps, ctx: Ctx, bundleId: number, asked: readonly FilePiece[]): Promise<LimitedResponse> {
  const client = clientOf(deps.access.ipOf(ctx), ctx.headers['user-agent']);
  const ld: LimitDeps = {
    sql: deps.sql,
    counted: (id) => deps.bundles.invalidate(id),
    exhausted: (key) => void deps.disk.remove(key).catch((err: unknown) => deps.log.warn({ err }, 'file at its download limit not removed')),
  };
  let sessions = await admitDownload(ld, bundleId, asked, client);
  // A client that cut a response and asks again from the same byte at once (aria2c, a browser's
  // retry) may find the cut response still in flight for a moment: it is given a little time to end.
  for (const ms of RETRY_MS) {
    if (sessions !== null || ctx.aborted) break;
    await new Promise((r) => setTimeout(r, ms));
    sessions = await admitDownload(ld, bundleId, asked, client);
  }
  if (sessions === null) throw new AppError('FILE_NOT_FOUND');
  return {
    credit: (sent) =>
      creditDownload(ld, bundleId, sessions, asked, sent).catch((err: unknown) => deps.log.error({ err, reqId: ctx.id }, 'download not credited')),
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
