-- Upload requests ("reverse shares"): a link through which anyone uploads files into one bundle owned by
-- an API key. Only a SHA-256 of the token is stored. The bundle is made with the request, empty and
-- locked by a password nobody knows, so only its owner's key opens it.
create table upload_requests (
  id          bigserial primary key,
  token_hash  bytea not null unique,
  -- the first 8 characters of the token, to tell requests apart in listings
  prefix      text not null,
  api_key_id  bigint not null references api_keys (id) on delete cascade,
  bundle_id   bigint not null references bundles (id) on delete cascade,
  label       text check (char_length(label) <= 200),
  max_bytes   bigint not null check (max_bytes > 0),
  max_files   integer not null check (max_files between 1 and 10000),
  created_at  timestamptz not null default now(),
  expires_at  timestamptz not null,
  closed_at   timestamptz
);
create index upload_requests_key on upload_requests (api_key_id, created_at desc);

-- Files that arrived through a request whose key has an e-mail, waiting to be batched into one mail to
-- it; at most one mail per request every 10 minutes, like download notifications (0005).
create table request_events (
  id          bigserial primary key,
  request_id  bigint not null references upload_requests (id) on delete cascade,
  what        text not null,
  size        bigint not null,
  at          timestamptz not null
);
create index request_events_request on request_events (request_id, id);
alter table upload_requests add column last_mailed_at timestamptz not null default to_timestamp(0);
