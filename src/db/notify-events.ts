import type { Sql } from './sql.ts';

/**
 * The events behind batched notification mails (files that arrived through an upload request,
 * downloads of a bundle) and the per-request / per-bundle lock that sends them at most once a window.
 * `send` composes and queues the mail inside the transaction: true marks the batch mailed at `t`;
 * false leaves the mark (the taken events are dropped either way).
 */
export type SendBatch<R, E> = (tx: Sql, row: R, events: E[]) => Promise<boolean>;

export interface RequestMailRow {
  label: string | null;
  short_code: string;
  email: string | null;
  last_mailed_at: Date;
}
export interface ArrivalEvent {
  what: string;
  size: number;
  at: Date;
}
export interface DownloadEvent {
  what: string;
  zip_files: number | null;
  at: Date;
}

export async function insertRequestEvents(
  sql: Sql,
  requestId: number,
  files: ReadonlyArray<{ name: string; size: number }>,
  at: Date,
): Promise<void> {
  await sql`
    insert into request_events (request_id, what, size, at)
    select ${requestId}, w, s, ${at} from unnest(${files.map((f) => f.name)}::text[], ${files.map((f) => f.size)}::int8[]) as x(w, s)`;
}

/** Requests with events up to `t` whose last mail is no later than `windowStart` (at most 100). */
export async function dueRequests(sql: Sql, t: Date, windowStart: Date): Promise<number[]> {
  const rows = await sql<{ request_id: number }[]>`
    select distinct e.request_id from request_events e join upload_requests r on r.id = e.request_id
    where e.at <= ${t} and r.last_mailed_at <= ${windowStart} limit 100`;
  return rows.map((r) => r.request_id);
}

export function mailRequestEvents(
  sql: Sql,
  id: number,
  t: Date,
  windowStart: Date,
  send: SendBatch<RequestMailRow, ArrivalEvent>,
): Promise<boolean> {
  return sql.begin(async (tx) => {
    // The row lock serializes workers of several processes on one request.
    const [r] = await tx<RequestMailRow[]>`
      select r.label, b.short_code, k.owner_email as email, r.last_mailed_at
      from upload_requests r join bundles b on b.id = r.bundle_id join api_keys k on k.id = r.api_key_id
      where r.id = ${id} for update of r`;
    if (!r || r.last_mailed_at > windowStart) return false;
    const events = await tx<ArrivalEvent[]>`
      delete from request_events where request_id = ${id} and at <= ${t} returning what, size, at`;
    if (!(await send(tx as unknown as Sql, r, events))) return false;
    await tx`update upload_requests set last_mailed_at = ${t} where id = ${id}`;
    return true;
  });
}

export async function insertDownloadEvent(sql: Sql, bundleId: number, what: string, zipFiles: number | null, at: Date): Promise<void> {
  await sql`insert into download_events (bundle_id, what, zip_files, at) values (${bundleId}, ${what}, ${zipFiles}, ${at})`;
}

/** Bundles with events up to `t` whose last mail is no later than `windowStart` (at most 100). */
export async function dueBundles(sql: Sql, t: Date, windowStart: Date): Promise<number[]> {
  const rows = await sql<{ bundle_id: number }[]>`
    select distinct e.bundle_id from download_events e
    left join bundle_notifications n on n.bundle_id = e.bundle_id
    where e.at <= ${t} and (n.last_sent_at is null or n.last_sent_at <= ${windowStart})
    limit 100`;
  return rows.map((r) => r.bundle_id);
}

export function mailDownloadEvents(
  sql: Sql,
  bundleId: number,
  t: Date,
  windowStart: Date,
  send: SendBatch<{ short_code: string; notify_email: string | null } | undefined, DownloadEvent>,
): Promise<boolean> {
  return sql.begin(async (tx) => {
    // The row lock serializes workers of several processes on one bundle.
    await tx`insert into bundle_notifications (bundle_id, last_sent_at) values (${bundleId}, to_timestamp(0))
             on conflict (bundle_id) do nothing`;
    const [n] = await tx<{ last_sent_at: Date }[]>`
      select last_sent_at from bundle_notifications where bundle_id = ${bundleId} for update`;
    if (!n || n.last_sent_at > windowStart) return false;
    const events = await tx<DownloadEvent[]>`
      delete from download_events where bundle_id = ${bundleId} and at <= ${t} returning what, zip_files, at`;
    const [b] = await tx<{ short_code: string; notify_email: string | null }[]>`
      select short_code, notify_email from bundles where id = ${bundleId}`;
    if (!(await send(tx as unknown as Sql, b, events))) return false;
    await tx`update bundle_notifications set last_sent_at = ${t} where bundle_id = ${bundleId}`;
    return true;
  });
}
