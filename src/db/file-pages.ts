import type { Sql } from './sql.ts';
import type { FileRow, FileSummary } from './rows.ts';

/** File rows read per query by listFilesInPages. */
const FILE_PAGE_ROWS = 1000;

/**
 * A bundle's files in the order they were added (`seq`), read a thousand rows per query with a turn
 * of the event loop between queries: listing a bundle of ten thousand files never holds the loop
 * (nor, embedded, the database) for the whole list. Not one snapshot: callers that must not mix two
 * states check for changes themselves (the bundle cache's generations, the zip plans' fingerprints).
 */
export async function listFilesInPages<K extends 'summary' | 'all'>(
  sql: Sql,
  bundleId: number,
  columns: K,
): Promise<Array<K extends 'all' ? FileRow : FileSummary>> {
  type Row = K extends 'all' ? FileRow : FileSummary;
  const cols = sql.unsafe(columns === 'all' ? 'f.*' : 'f.id, f.name, f.size, f.mime_type, f.downloads_done');
  const out: Row[] = [];
  for (let after = 0; ; ) {
    // (the cursor comes under a name of its own, so that no answer built from a row carries it)
    const page = await sql<Array<Row & { page_seq: number; seq?: number }>>`
      select ${cols}, f.seq as page_seq from files f where f.bundle_id = ${bundleId} and f.seq > ${after} order by f.seq limit ${FILE_PAGE_ROWS}`;
    for (const row of page) {
      const { page_seq: _, seq: __, ...rest } = row;
      out.push(rest as unknown as Row);
    }
    if (page.length < FILE_PAGE_ROWS) return out;
    after = page[page.length - 1]!.page_seq;
    await new Promise((r) => setImmediate(r));
  }
}

/** How many files a bundle holds and the place of its newest: a plan built for them still holds while both are unchanged. */
export async function filesFingerprint(sql: Sql, bundleId: number): Promise<{ n: number; last: number } | undefined> {
  const [row] = await sql<{ n: number; last: number }[]>`
    select count(*)::int as n, coalesce(max(seq), 0) as last from files where bundle_id = ${bundleId}`;
  return row;
}
