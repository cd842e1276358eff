import type { Sql } from './sql.ts';

// Download sessions of limited bundles (sql/0014_download_limits.sql); bundles/limits.ts tells the
// rule they keep. Every step runs under the bundle's row lock.

/**
 * What a client may lack and still count as served a whole copy: a file's 64th, at most 64 KiB
 * (`f` is the file's row).
 */
const NEARLY_WHOLE_SQL = 'least(65536, f.size / 64)';

/** A session untouched this long gives its download back. */
const SESSION_LEASE = '6 hours';

/** A piece of one file a response sends: bytes [from, to) of the file. */
export interface FilePiece {
  readonly fileId: number;
  readonly from: number;
  readonly to: number;
}

/** Thrown inside the transaction to undo sessions already joined when a later file has none left. */
class NoneLeft extends Error {}

/**
 * Joins or starts this client's session for each piece, all or none: the session ids by file id,
 * or null when a file has no download left. Bundles without a limit return an empty map.
 */
export async function admitDownload(sql: Sql, bundleId: number, pieces: readonly FilePiece[], client: Buffer): Promise<Map<number, number> | null> {
  const ids = pieces.map((p) => p.fileId);
  try {
    return (await sql.begin(async (tx) => {
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
 * a file whose downloads are then all counted: whether any download counted, and the storage keys
 * of the files deleted.
 */
export async function creditDownload(
  sql: Sql,
  bundleId: number,
  sessions: ReadonlyMap<number, number>,
  asked: readonly FilePiece[],
  sent: readonly FilePiece[],
): Promise<{ counted: boolean; gone: string[] }> {
  if (sessions.size === 0) return { counted: false, gone: [] };
  const sentOf = new Map(sent.map((p) => [p.fileId, p]));
  let counted = false;
  const gone = await sql.begin(async (tx) => {
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
        returning d.sent >= f.size
               or (select coalesce(sum(upper(r) - lower(r)), 0) from unnest(d.covered) r) >= f.size - ${tx.unsafe(NEARLY_WHOLE_SQL)} as whole`; // (RETURNING sees the row as updated)
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
  return { counted, gone: gone as string[] };
}

