import type { Sql } from './client.ts';
import type { FileRow, FileSummary } from './bundles.ts';

/** File rows read per query by listFilesInPages. */
const FILE_PAGE_ROWS = 1000;

/**
 * A bundle's files in id order, read a thousand rows per query with a turn of the event loop
 * between queries: listing a bundle of ten thousand files never holds the loop (nor, embedded, the
 * database) for the whole list. Not one snapshot: callers that must not mix two states check for
 * changes themselves (the bundle cache's generations, the zip plans' fingerprints).
 */
export async function listFilesInPages<K extends 'summary' | 'all'>(
  sql: Sql,
  bundleId: number,
  columns: K,
): Promise<Array<K extends 'all' ? FileRow : FileSummary>> {
  const cols = sql.unsafe(columns === 'all' ? '*' : 'id, name, size, mime_type, downloads_done');
  const out: Array<K extends 'all' ? FileRow : FileSummary> = [];
  for (let after = 0; ; ) {
    const page = await sql<Array<K extends 'all' ? FileRow : FileSummary>>`
      select ${cols} from files where bundle_id = ${bundleId} and id > ${after} order by id limit ${FILE_PAGE_ROWS}`;
    out.push(...page);
    if (page.length < FILE_PAGE_ROWS) return out;
    after = page[page.length - 1]!.id;
    await new Promise((r) => setImmediate(r));
  }
}

/** How many files a bundle holds and its newest file id: a plan built for them still holds while both are unchanged. */
export async function filesFingerprint(sql: Sql, bundleId: number): Promise<{ n: number; last: number } | undefined> {
  const [row] = await sql<{ n: number; last: number }[]>`
    select count(*)::int as n, coalesce(max(id), 0) as last from files where bundle_id = ${bundleId}`;
  return row;
}
