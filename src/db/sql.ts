import type postgres from 'postgres';

/** The query function every SQL module takes (the postgres driver's, on either database backend). */
export type Sql = postgres.Sql<Record<string, never>>;

/** A query not yet settled; `execute()` sends it at once. */
export type PendingQuery<T extends readonly postgres.MaybeRow[]> = postgres.PendingQuery<T>;
export type RowList<T extends readonly postgres.MaybeRow[]> = postgres.RowList<T>;
