import type { Deps } from '../deps.ts';
import { findUpload, holdUpload, markSpent, type TusRow } from '../db/tus-uploads.ts';
import type { UploadLock } from '../db/upload-locks.ts';
import { AppError } from '../errors.ts';

// The concatenation extension: partial uploads (pieces of one file, sent in parallel) that a final
// upload joins, in order, into one file of a bundle. A partial is never a file or bundle of its own.

/** Partials one final upload may join. */
const MAX_PARTIALS = 100;

/** A creation's Upload-Concat: a partial upload, or a final one naming its partials in order. */
export type Concat = { readonly kind: 'partial' } | { readonly kind: 'final'; readonly ids: readonly string[]; readonly raw: string };

const bad = (message: string): AppError => new AppError('INVALID_CONCAT', message);

export function parseConcat(raw: string | undefined): Concat | null {
  if (raw === undefined) return null;
  const value = raw.trim();
  if (value === 'partial') return { kind: 'partial' };
  const m = /^final;(.*)$/.exec(value);
  if (!m) throw bad('Upload-Concat must be "partial" or "final;" followed by the partial uploads\' URLs');
  const urls = m[1]!.trim().split(/ +/).filter((u) => u !== '');
  if (urls.length === 0 || urls.length > MAX_PARTIALS) throw bad(`A final upload joins 1 to ${MAX_PARTIALS} partial uploads`);
  const ids = urls.map((u) => {
    let pathname = '';
    try {
      pathname = new URL(u, 'http://relative.invalid').pathname;
    } catch {
      // not a URL: refused below
    }
    const id = /^\/api\/v1\/tus\/([0-9a-f]{32})$/.exec(pathname)?.[1];
    if (id === undefined) throw bad(`Upload-Concat names no upload of this server: ${u.slice(0, 100)}`);
    return id;
  });
  if (new Set(ids).size !== ids.length) throw bad('Upload-Concat names a partial upload twice');
  return { kind: 'final', ids, raw: value };
}

export interface HeldPartials {
  /**
   * Not null: every partial named was already joined, in this order, into this final upload (the
   * same request repeated); nothing is held, and the answer is the first one again.
   */
  readonly joinedInto: string | null;
  readonly rows: readonly TusRow[];
  /** Their bytes in all. */
  readonly length: number;
  /** Frees the locks; a second call does nothing. Never rejects. */
  release(): Promise<void>;
}

/**
 * Locks every partial a final upload names, so none is written to, joined or terminated meanwhile,
 * and checks each is a finished partial upload. Only finished ones are joined (the server does not
 * offer concatenation-unfinished).
 */
export async function holdPartials(deps: Deps, ids: readonly string[]): Promise<HeldPartials> {
  const rows: TusRow[] = [];
  const locks: UploadLock[] = [];
  const release = async (): Promise<void> => {
    await Promise.all(locks.splice(0).map((l) => l.release()));
  };
  try {
    for (const id of ids) {
      const held = await holdUpload(deps.uploadLocks, id);
      if (held === 'locked') throw new AppError('UPLOAD_LOCKED', 'Another request is using a partial upload');
      if (!held) throw bad('Upload-Concat names an upload that does not exist or has expired');
      locks.push(held.lock);
      const row = held.row;
      rows.push(row);
      if (row.is_expired) throw bad('Upload-Concat names an upload that does not exist or has expired');
      if (row.concat !== 'partial') throw bad('Upload-Concat names an upload that is not a partial upload');
      if (row.completed_at === null && (row.upload_length === null || row.upload_offset !== row.upload_length)) {
        throw bad('A partial upload named in Upload-Concat is not finished');
      }
    }
    const joinedInto = await joinedBefore(deps, rows, ids);
    if (joinedInto !== null) await release();
    return { joinedInto, rows, length: rows.reduce((n, r) => n + (r.upload_length ?? 0), 0), release };
  } catch (err) {
    await release();
    throw err;
  }
}

/**
 * The final upload these partials were joined into, in this very order, when the request repeats one
 * whose answer its client lost; null when none of them was joined. Any other mix is refused.
 */
async function joinedBefore(deps: Deps, rows: readonly TusRow[], ids: readonly string[]): Promise<string | null> {
  if (rows.every((r) => r.completed_at === null)) return null;
  const into = rows[0]!.joined_into;
  const final = into === null || !rows.every((r) => r.joined_into === into) ? undefined : await findUpload(deps.sql, into);
  const before = final?.concat ? parseConcat(final.concat) : null;
  const sameOrder = before?.kind === 'final' && before.ids.join() === ids.join();
  if (!final || final.is_expired || !sameOrder) throw bad('A partial upload named in Upload-Concat was already joined into a final upload');
  return final.id;
}

/**
 * The partials are spent once their final upload completed: each is marked finished with no file of
 * its own, and its part goes. The sessions stay until they expire, so a client that terminates the
 * partials after the final (tus-js-client's abort(true) does) gets its 204s; they cannot be joined again.
 */
export async function spendPartials(deps: Deps, rows: readonly TusRow[], into: string): Promise<void> {
  await markSpent(deps.sql, rows.map((r) => r.id), into);
  for (const r of rows) await deps.blobs.removeResumable(r.id);
}
