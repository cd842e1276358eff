-- Resumable uploads (tus 1.0.0). A row lives from the creation POST until it expires; the part
-- file DATA_DIR/tus/<id>.part is named only by the server-made id. Offsets and lengths are bytes.
create table tus_uploads (
  id            text primary key check (id ~ '^[0-9a-f]{32}$'),
  -- append to this bundle (upload_token metadata); null: a new bundle is created on completion
  bundle_id     bigint references bundles (id) on delete cascade,
  -- the new bundle's fields (password already hashed, expiry days of the plan); null when appending
  new_bundle    jsonb,
  api_key_id    bigint,
  -- null until the client declares it (creation-defer-length)
  upload_length bigint check (upload_length >= 0),
  upload_offset bigint not null default 0 check (upload_offset >= 0),
  -- the most bytes this upload may hold (plan cap, or the bundle's room at creation)
  max_bytes     bigint not null,
  file_name     text not null,
  mime_type     text not null,
  metadata      text not null default '',
  -- a PATCH or DELETE in progress holds the row until lease_until (refreshed while it streams)
  lease_owner   text,
  lease_until   timestamptz,
  completed_at  timestamptz,
  file_id       bigint,
  expires_at    timestamptz not null,
  created_at    timestamptz not null default now(),
  check (upload_length is null or upload_offset <= upload_length)
);
create index tus_uploads_expires_at on tus_uploads (expires_at);
create index tus_uploads_bundle on tus_uploads (bundle_id) where bundle_id is not null and completed_at is null;
