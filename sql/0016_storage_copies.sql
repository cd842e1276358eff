-- `sluice storage migrate`: which stored files have a verified copy in which bucket, so a run that was
-- stopped (or a later run, after new uploads) copies only the rest. `target` names the bucket, its prefix
-- and its endpoint; `sha256` is the hash of the bytes read back from it. Rows are never read by the server,
-- and a row whose file is gone since is harmless.
create table storage_copies (
  target       text not null,
  storage_key  text not null check (storage_key ~ '^[0-9a-f]{32}$'),
  size         bigint not null check (size >= 0),
  sha256       bytea not null,
  verified_at  timestamptz not null default now(),
  primary key (target, storage_key)
);
