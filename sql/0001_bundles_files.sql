-- Bundles and their files. Sizes are bytes; times are UTC timestamptz.
create table bundles (
  id                   bigserial primary key,
  short_code           text not null unique check (short_code ~ '^[a-zA-Z0-9]{5}$'),
  upload_token_hash    bytea not null unique,
  description          text check (char_length(description) <= 1000),
  access_password_hash text,
  notify_email         text check (char_length(notify_email) <= 255),
  is_encrypted         boolean not null default false,
  api_key_id           bigint,
  max_size_bytes       bigint not null,
  total_size_bytes     bigint not null default 0 check (total_size_bytes >= 0),
  file_count           integer not null default 0 check (file_count >= 0),
  view_count           bigint not null default 0,
  created_at           timestamptz not null default now(),
  -- null: never expires (premium plan)
  expires_at           timestamptz,
  check (total_size_bytes <= max_size_bytes)
);
create index bundles_expires_at on bundles (expires_at) where expires_at is not null;
create index bundles_api_key on bundles (api_key_id, created_at desc) where api_key_id is not null;

create table files (
  id             bigserial primary key,
  bundle_id      bigint not null references bundles (id) on delete cascade,
  -- 32 hex characters made by the server; the only thing the disk path is built from
  storage_key    text not null unique check (storage_key ~ '^[0-9a-f]{32}$'),
  name           text not null,
  size           bigint not null check (size >= 0),
  mime_type      text not null,
  sha256         bytea not null,
  crc32          bigint not null,
  download_count bigint not null default 0,
  created_at     timestamptz not null default now()
);
create index files_bundle on files (bundle_id, id);
