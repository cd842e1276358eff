-- API keys: only a SHA-256 of the key is stored; `prefix` (first 12 characters) identifies it to people.
create table api_keys (
  id           bigserial primary key,
  key_hash     bytea not null unique,
  prefix       text not null unique,
  label        text,
  plan         text not null check (plan in ('starter', 'power', 'max', 'premium')),
  revoked_at   timestamptz,
  -- one-time passes (and ended subscriptions) stop working at this time; null: no end
  expires_at   timestamptz,
  owner_email  text,
  created_at   timestamptz not null default now(),
  last_used_at timestamptz
);

alter table bundles
  add constraint bundles_api_key_fk foreign key (api_key_id) references api_keys (id) on delete set null;
