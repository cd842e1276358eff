-- Webhook endpoints of API keys, the outbox of their events, and the log of delivery attempts.
-- An event is written in the transaction of the change that caused it, so it exists if and only if
-- the change committed; a delivery worker of any node claims it with `for update skip locked`.
create table webhooks (
  -- Public (/api/v1/my/webhooks/<id>): random, so no one learns how many exist by counting.
  id bigint primary key default (1 + floor(random() * 9007199254740990))::bigint,
  api_key_id bigint not null references api_keys (id) on delete cascade,
  url text not null,
  events text[] not null,
  -- The signing secret, sealed with SECRET: delivery needs it back, unlike the secrets stored as hashes.
  secret_sealed bytea not null,
  created_at timestamptz not null default now(),
  -- Since when every attempt has failed (null: the last one succeeded); three days of it disables the endpoint.
  failing_since timestamptz,
  disabled_at timestamptz,
  disabled_reason text
);
create index webhooks_key on webhooks (api_key_id);

create table webhook_events (
  -- The webhook-id header: the same on every retry.
  id text primary key,
  webhook_id bigint not null references webhooks (id) on delete cascade,
  type text not null,
  -- The body exactly as signed and sent, every time.
  body text not null,
  created_at timestamptz not null default now(),
  next_attempt_at timestamptz not null default now(),
  attempts int not null default 0,
  delivered_at timestamptz,
  given_up_at timestamptz
);
create index webhook_events_due on webhook_events (next_attempt_at) where delivered_at is null and given_up_at is null;

create table webhook_attempts (
  id bigserial primary key,
  webhook_id bigint not null references webhooks (id) on delete cascade,
  event_id text not null,
  event text not null,
  attempted_at timestamptz not null default now(),
  -- The HTTP status of the answer; null when there was none (refused address, timeout, connection error).
  status int,
  error text
);
create index webhook_attempts_webhook on webhook_attempts (webhook_id, id desc);
