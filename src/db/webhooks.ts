import type { Sql } from './sql.ts';

/** The events an endpoint may ask for (the `events` column's values). */
export const EVENT_TYPES = ['bundle.created', 'bundle.files_added', 'file.downloaded', 'bundle.expired', 'bundle.deleted', 'request.upload_received'] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export interface WebhookRow {
  id: number;
  api_key_id: number;
  url: string;
  events: EventType[];
  secret_sealed: Uint8Array;
  created_at: Date;
  failing_since: Date | null;
  disabled_at: Date | null;
  disabled_reason: string | null;
}

/** The files of an event, as JSON: `{id, name, size}` of the rows `from` yields (a table or a CTE), by seq. */
export const filesJson = (from: string): string =>
  `(select coalesce(json_agg(json_build_object('id', f.id, 'name', f.name, 'size', f.size) order by f.seq), '[]'::json) from ${from})`;

const NOW_ISO = `to_char(clock_timestamp() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * The statement that queues event `type` for every enabled endpoint, asking for it, of the key that owns
 * each bundle `source` names: `source` is a query with columns `api_key_id`, `short_code` and `files`
 * (json). Run inside the transaction (or as a CTE of the statement) that makes the change, so an event
 * exists exactly when its change committed. `type` is one of EVENT_TYPES, never client text.
 */
export function queueEventsSql(type: EventType, source: string): string {
  return `insert into webhook_events (id, webhook_id, type, body)
    select 'msg_' || replace(gen_random_uuid()::text, '-', ''), w.id, '${type}',
           json_build_object('type', '${type}', 'timestamp', ${NOW_ISO},
                             'data', json_build_object('short_code', s.short_code, 'files', s.files))::text
    from (${source}) s join webhooks w on w.api_key_id = s.api_key_id
    where w.disabled_at is null and '${type}' = any(w.events)
      and not exists (select 1 from api_keys k where k.id = w.api_key_id and k.revoked_at is not null)
    for key share of w`;
}

/** Queues `type` for bundles `bundleIds` with all their files (a deletion or an expiry, before the rows go). */
export async function queueBundleEvents(tx: Sql, type: EventType, bundleIds: readonly number[]): Promise<void> {
  const source = `select b.api_key_id, b.short_code, ${filesJson('files f where f.bundle_id = b.id')} as files
                  from bundles b where b.id = any($1::int8[]) and b.api_key_id is not null`;
  await tx.unsafe(queueEventsSql(type, source), [bundleIds as number[]]);
}

/** Queues `type` for files `fileIds` just added to bundle `bundleId`. */
export async function queueFilesEvent(tx: Sql, type: EventType, bundleId: number, fileIds: readonly number[]): Promise<void> {
  const source = `select b.api_key_id, b.short_code, ${filesJson('files f where f.id = any($1::int8[])')} as files
                  from bundles b where b.id = $2 and b.api_key_id is not null`;
  await tx.unsafe(queueEventsSql(type, source), [fileIds as number[], bundleId]);
}

/**
 * Adds an endpoint unless the key has `most` already (false then). The key's row is locked meanwhile,
 * so two registrations at once cannot both pass the count.
 */
export async function insertWebhook(
  sql: Sql,
  w: { id: number; apiKeyId: number; url: string; events: readonly EventType[]; secretSealed: Buffer },
  most: number,
): Promise<boolean> {
  return sql.begin(async (tx) => {
    await tx`select 1 from api_keys where id = ${w.apiKeyId} for update`;
    const [count] = await tx<{ n: string }[]>`select count(*) as n from webhooks where api_key_id = ${w.apiKeyId}`;
    if (Number(count!.n) >= most) return false;
    await tx`insert into webhooks (id, api_key_id, url, events, secret_sealed)
             values (${w.id}, ${w.apiKeyId}, ${w.url}, ${w.events as EventType[]}, ${w.secretSealed})`;
    return true;
  }) as Promise<boolean>;
}

export const listWebhooks = (sql: Sql, apiKeyId: number): Promise<WebhookRow[]> =>
  sql<WebhookRow[]>`select * from webhooks where api_key_id = ${apiKeyId} order by created_at, id`;

/** Whether the key owned endpoint `id` (its events and attempts go with it). */
export async function deleteWebhook(sql: Sql, apiKeyId: number, id: number): Promise<boolean> {
  return (await sql`delete from webhooks where id = ${id} and api_key_id = ${apiKeyId} returning 1`).length > 0;
}

export interface AttemptRow {
  event_id: string;
  event: string;
  attempted_at: Date;
  status: number | null;
  error: string | null;
}

/** The last 100 attempts at endpoint `id` of key `apiKeyId`, newest first; undefined: no such endpoint. */
export async function listAttempts(sql: Sql, apiKeyId: number, id: number): Promise<AttemptRow[] | undefined> {
  const [w] = await sql`select 1 from webhooks where id = ${id} and api_key_id = ${apiKeyId}`;
  if (!w) return undefined;
  return sql<AttemptRow[]>`select event_id, event, attempted_at, status, error from webhook_attempts
                           where webhook_id = ${id} order by id desc limit 100`;
}

export interface DueEvent {
  id: string;
  type: string;
  body: string;
  attempts: number;
  webhook_id: number;
  url: string;
  secret_sealed: Uint8Array;
}

/**
 * Claims up to `batch` due events of enabled endpoints for `leaseSeconds`, counting the attempt. `for
 * update skip locked`: several workers, on several nodes, never claim the same event at once; one
 * that dies mid-delivery leaves it to be claimed again when the lease ends.
 */
export function claimDueEvents(sql: Sql, batch: number, leaseSeconds: number, busy: readonly number[]): Promise<DueEvent[]> {
  return sql<DueEvent[]>`
    with due as (
      select e.id from webhook_events e join webhooks w on w.id = e.webhook_id
      where e.delivered_at is null and e.given_up_at is null and e.next_attempt_at <= now() and w.disabled_at is null
        and e.webhook_id <> all(${busy as number[]}::int8[])
        -- One event per endpoint per claim: an endpoint's events go one at a time, and a slow one takes one slot.
        and e.id = (select e2.id from webhook_events e2
                    where e2.webhook_id = e.webhook_id and e2.delivered_at is null and e2.given_up_at is null and e2.next_attempt_at <= now()
                    order by e2.next_attempt_at, e2.id limit 1)
      order by e.next_attempt_at limit ${batch}
      for update of e skip locked
    ), claimed as (
      update webhook_events e set attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => ${leaseSeconds})
      from due where e.id = due.id
      returning e.id, e.type, e.body, e.attempts, e.webhook_id
    )
    select c.*, w.url, w.secret_sealed from claimed c join webhooks w on w.id = c.webhook_id`;
}

/**
 * Records one attempt and its outcome: delivered, retried after `retrySeconds`, or given up (null).
 * A failure starts or continues the endpoint's failing streak, which disables it once it is `disableAfterHours` old.
 */
export async function recordAttempt(
  sql: Sql,
  e: DueEvent,
  outcome: { status: number | null; error: string | null; delivered: boolean; retrySeconds: number | null; disableAfterHours: number },
): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`insert into webhook_attempts (webhook_id, event_id, event, status, error)
             values (${e.webhook_id}, ${e.id}, ${e.type}, ${outcome.status}, ${outcome.error})`;
    // The log keeps the last 100 attempts of each endpoint.
    await tx`delete from webhook_attempts where webhook_id = ${e.webhook_id} and id <= (
               select id from webhook_attempts where webhook_id = ${e.webhook_id} order by id desc offset 100 limit 1)`;
    if (outcome.delivered) {
      await tx`update webhook_events set delivered_at = now() where id = ${e.id}`;
      await tx`update webhooks set failing_since = null where id = ${e.webhook_id}`;
      return;
    }
    if (outcome.retrySeconds === null) await tx`update webhook_events set given_up_at = now() where id = ${e.id}`;
    else await tx`update webhook_events set next_attempt_at = now() + make_interval(secs => ${outcome.retrySeconds}) where id = ${e.id}`;
    await tx`update webhooks set failing_since = coalesce(failing_since, now()) where id = ${e.webhook_id}`;
    const disabled = await tx`update webhooks set disabled_at = now(),
               disabled_reason = 'every delivery failed since ' || to_char(failing_since at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ': ' || ${outcome.error ?? `HTTP ${outcome.status}`}
             where id = ${e.webhook_id} and disabled_at is null and failing_since <= now() - make_interval(hours => ${outcome.disableAfterHours})
             returning 1`;
    // A disabled endpoint's waiting events are given up with it (and pruned in a week).
    if (disabled.length > 0) {
      await tx`update webhook_events set given_up_at = now() where webhook_id = ${e.webhook_id} and delivered_at is null and given_up_at is null`;
    }
  });
}

/** Forgets events delivered or given up more than a week ago (their attempts stay in the log). */
export async function pruneWebhookEvents(sql: Sql): Promise<number> {
  return (await sql`delete from webhook_events
                    where coalesce(delivered_at, given_up_at) < now() - interval '7 days' returning 1`).length;
}
