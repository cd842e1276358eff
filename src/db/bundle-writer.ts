import type { Sql } from './sql.ts';
import { hashesOf, insertBundles, withFreshFileIds, type BundleInsert, type InsertedBundle, type NewBundle, type NewFile } from './bundles.ts';
import { blockedAmong } from './abuse.ts';
import { AppError } from '../errors.ts';

/** How many short codes a bundle is tried with before its insert fails. */
const SHORT_CODE_ATTEMPTS = 10;

/**
 * New bundles, committed in groups. A bundle asked for while no group is being written goes at once,
 * alone; those asked for while `maxInFlight` groups are being written wait, and all of them go in the
 * next statement when one finishes. Nobody waits on a timer, and each caller still gets its answer
 * only after its own rows are committed. A burst of small uploads then shares round trips and WAL
 * flushes (one statement of N bundles cost PostgreSQL about a third per bundle of N statements).
 *
 * A statement that fails on the data (a constraint, a bad value) is retried one bundle per statement,
 * so only the bundle at fault fails; any other failure (the database gone) fails the whole group.
 */
export interface BundleWriter {
  /** Creates a bundle and its file rows (at least one); resolves once they are committed. */
  insert(bundle: NewBundle, files: NewFile[]): Promise<InsertedBundle>;
}

interface Waiting {
  item: BundleInsert;
  /** Short codes tried so far. */
  tries: number;
  /** Goes in a statement of its own (its group failed on the data). */
  alone: boolean;
  resolve: (got: InsertedBundle) => void;
  reject: (err: unknown) => void;
}

export function createBundleWriter(deps: {
  sql: Sql;
  /** Statements written at once: one, since more in flight make the groups smaller (bench/RESULTS.md). */
  maxInFlight?: number;
  maxFilesPerStatement?: number;
  /** Short codes (tests pass a taken one). */
  newCode?: () => string;
}): BundleWriter {
  const { sql } = deps;
  const maxInFlight = deps.maxInFlight ?? 1;
  const maxFiles = deps.maxFilesPerStatement ?? 1000;
  let queue: Waiting[] = [];
  let inFlight = 0;

  /** The next statement's share of the queue: at least one bundle, up to `maxFiles` files. */
  const takeGroup = (): Waiting[] => {
    if (queue[0]!.alone) return queue.splice(0, 1);
    const group: Waiting[] = [];
    const rest: Waiting[] = [];
    let files = 0;
    for (const w of queue) {
      if (!w.alone && (group.length === 0 || files + w.item.files.length <= maxFiles)) {
        group.push(w);
        files += w.item.files.length;
      } else rest.push(w);
    }
    queue = rest;
    return group;
  };

  const pump = (): void => {
    while (inFlight < maxInFlight && queue.length > 0) {
      const group = takeGroup();
      inFlight++;
      void write(group).finally(() => {
        inFlight--;
        pump();
      });
    }
  };

  /**
   * Writes the group; with hashes recorded, in a transaction that first asks which are blocked (see
   * blockedAmong): a bundle holding one is refused and not written, the others are.
   */
  const insertGroup = (group: Waiting[]): Promise<(InsertedBundle | null | 'blocked')[]> => withFreshFileIds(() => insertOnce(group));
  const insertOnce = async (group: Waiting[]): Promise<(InsertedBundle | null | 'blocked')[]> => {
    const each = group.map((w) => hashesOf(w.item.files));
    const hashes = each.flat();
    if (hashes.length === 0) return insertBundles(sql, group.map((w) => w.item), deps.newCode);
    return sql.begin(async (t) => {
      const tx = t as unknown as Sql;
      const blocked = await blockedAmong(tx, hashes);
      const refused = each.map((hs) => hs.some((h) => blocked.has(h)));
      const go = group.filter((_, i) => !refused[i]);
      const got = go.length > 0 ? await insertBundles(tx, go.map((w) => w.item), deps.newCode) : [];
      let next = 0;
      return refused.map((r) => (r ? 'blocked' : (got[next++] ?? null)));
    }) as Promise<(InsertedBundle | null | 'blocked')[]>;
  };

  const write = async (group: Waiting[]): Promise<void> => {
    let got: (InsertedBundle | null | 'blocked')[];
    try {
      got = await insertGroup(group);
    } catch (err) {
      if (group.length > 1 && isDataError(err)) {
        for (const w of group) w.alone = true;
        queue.unshift(...group);
      } else for (const w of group) w.reject(err);
      return;
    }
    group.forEach((w, i) => {
      const row = got[i];
      if (row === 'blocked') w.reject(new AppError('BLOCKED_CONTENT'));
      else if (row) w.resolve(row);
      else if (++w.tries >= SHORT_CODE_ATTEMPTS) w.reject(new Error(`no free short code in ${SHORT_CODE_ATTEMPTS} attempts`));
      else queue.unshift(w); // its short code was taken: again with a new one, first in line
    });
  };

  return {
    insert(bundle, files) {
      if (files.length === 0) return Promise.reject(new Error('a new bundle needs at least one file'));
      return new Promise<InsertedBundle>((resolve, reject) => {
        queue.push({ item: { bundle, files }, tries: 0, alone: false, resolve, reject });
        pump();
      });
    },
  };
}

/** A PostgreSQL error about the statement's data (SQLSTATE classes 22 and 23), not the connection. */
function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23'));
}
