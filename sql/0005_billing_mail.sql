-- Mail outbox: every mail is a row first, so a request never waits for SMTP and a failed send is
-- retried. `body` is AES-256-GCM sealed (it may carry a freshly minted API key); delivered rows are deleted.
create table mail_outbox (
  id              bigserial primary key,
  to_addr         text not null,
  subject         text not null,
  body            bytea not null,
  attempts        integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  last_error      text,
  -- set when the outbox gives up (72 hours of failures); the row stays for the operator
  failed_at       timestamptz,
  created_at      timestamptz not null default now()
);
create index mail_outbox_due on mail_outbox (next_attempt_at) where failed_at is null;

-- Stripe webhook events already handled: the primary key makes a redelivery a no-op.
create table stripe_events (
  id          text primary key,
  type        text not null,
  received_at timestamptz not null default now()
);

-- One row per paid checkout session; the unique session id makes minting idempotent.
create table purchases (
  id                  bigserial primary key,
  checkout_session_id text not null unique,
  mode                text not null check (mode in ('subscription', 'payment')),
  plan                text not null check (plan in ('starter', 'power', 'max', 'premium')),
  email               text not null,
  customer_id         text,
  subscription_id     text unique,
  api_key_id          bigint references api_keys (id) on delete set null,
  -- subscription state as Sluice sees it: active, past_due (grace running) or canceled (final)
  status              text not null default 'active' check (status in ('active', 'past_due', 'canceled')),
  -- `created` of the newest Stripe event applied to status: an older event delivered late changes nothing
  state_event_at      timestamptz,
  -- the minted key, sealed, until the success page reveals it or reveal_until passes
  key_sealed          bytea,
  reveal_until        timestamptz,
  created_at          timestamptz not null default now()
);
create index purchases_email on purchases (lower(email));
create index purchases_sealed on purchases (reveal_until) where key_sealed is not null;

-- Single-use billing-portal links: only the SHA-256 of the token is stored.
create table portal_tokens (
  token_hash  bytea primary key,
  customer_id text not null,
  expires_at  timestamptz not null,
  used_at     timestamptz
);

-- Downloads of bundles with a notify_email, waiting to be batched into one mail.
create table download_events (
  id          bigserial primary key,
  bundle_id   bigint not null references bundles (id) on delete cascade,
  what        text not null,
  at          timestamptz not null
);
create index download_events_bundle on download_events (bundle_id, id);

-- When each bundle's last notification went out: at most one per bundle per 10 minutes.
create table bundle_notifications (
  bundle_id    bigint primary key references bundles (id) on delete cascade,
  last_sent_at timestamptz not null
);
