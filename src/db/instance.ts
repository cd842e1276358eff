import type { Sql } from './sql.ts';

/** The database's instance id (one row, made by the migrations): names this deployment's Redis keys. */
export async function instanceId(sql: Sql): Promise<string> {
  const [instance] = await sql<{ id: string }[]>`select id from instance`;
  return instance!.id;
}

/** One round trip: whether the database answers (`/readyz`). */
export async function ping(sql: Sql): Promise<void> {
  await sql`select 1`;
}
