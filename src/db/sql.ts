import type postgres from 'postgres';

/** The query function every SQL module takes (the postgres driver's, on either database backend). */
export type Sql = postgres.Sql<Record<string, never>>;
