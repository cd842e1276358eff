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
