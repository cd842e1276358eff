import type { Sql } from './sql.ts';
import { ACTIVE_BUNDLE } from './bundle-room.ts';

// The console overview's cluster-wide figures (sql/0024_console_overview.sql): one row a step, taken by
// one node of the cluster, kept a day.

/** A node samples the cluster every this many of its own samples (every minute at the default 10 s). */
export const CLUSTER_EVERY = 6;

export interface ClusterSample {
  /** Unix seconds: the start of the step. */
  readonly at: number;
  readonly liveBundles: number | null;
  /** The files of every bundle still stored: an expired bundle's count until the sweep removes them. */
  readonly storedBytes: number | null;
  readonly openReports: number | null;
}

/**
 * Takes the sample of the step (`stepSeconds` long, aligned to the epoch) `now()` falls in, unless a
 * node already has: inserting the step's row is the claim, and only the node whose insert won reads
 * the tables. The read is one pass over `bundles` (its totals, no files): about 0.2 s at a million
 * bundles, once a step for the whole cluster. Returns whether this call took the sample.
 */
export async function takeClusterSample(sql: Sql, stepSeconds: number): Promise<boolean> {
  const [claim] = await sql<{ at: Date }[]>`
    insert into console_samples (at) values (to_timestamp(floor(extract(epoch from now()) / ${stepSeconds}) * ${stepSeconds}))
    on conflict (at) do nothing returning at`;
  if (!claim) return false;
  await sql`
    update console_samples s
    set live_bundles = g.live, stored_bytes = g.bytes, open_reports = (select count(*) from reports where closed_at is null)
    from (select count(*) filter (where ${sql.unsafe(ACTIVE_BUNDLE)}) as live, coalesce(sum(b.total_size_bytes), 0) as bytes from bundles b) g
    where s.at = ${claim.at}`;
  await sql`delete from console_samples where at < now() - interval '25 hours'`;
  return true;
}

/** The samples of the last `seconds`, oldest first. */
export const clusterSamples = (sql: Sql, seconds: number): Promise<ClusterSample[]> =>
  sql<ClusterSample[]>`
    select extract(epoch from s.at)::float8 as at, s.live_bundles::float8 as "liveBundles", s.stored_bytes::float8 as "storedBytes",
           s.open_reports::float8 as "openReports"
    from console_samples s where s.at > now() - make_interval(secs => ${seconds}) order by s.at`;

/**
 * What each tick of a node's sampler runs: a claim of the database's current step. The database's
 * clock alone decides the step (a node whose clock drifts still skips none); a step already taken
 * costs the node one insert that does nothing.
 */
export function clusterSampler(sql: Sql, stepSeconds: number): () => Promise<boolean> {
  return () => takeClusterSample(sql, stepSeconds);
}
