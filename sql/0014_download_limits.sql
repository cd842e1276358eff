-- Download limits: each file of a bundle with max_downloads can be downloaded in full that many times.
alter table bundles add column max_downloads integer check (max_downloads between 1 and 1000);
-- Complete downloads counted against the limit (download_count counts every complete response).
alter table files add column downloads_done integer not null default 0;

-- One download of a limited file in progress: which bytes it was sent so far, by any mix of Range
-- requests, parallel segments and zips, and which ranges responses are sending now. It holds one of
-- the file's downloads while it is live (touched within the lease), so live sessions plus
-- downloads_done never pass the limit. When `covered` spans the whole file the download counts and
-- the session ends. A client (address and user agent) has one per download it runs at once.
create table download_sessions (
  id         bigserial primary key,
  file_id    bigint not null references files (id) on delete cascade,
  -- a hash of the client's address and user agent
  client     bytea not null,
  covered    int8multirange not null default '{}',
  inflight   int8multirange not null default '{}',
  -- every byte sent for this session, overlaps included: bounds a client that never asks for the last bytes
  sent       bigint not null default 0,
  touched_at timestamptz not null default now()
);
create index download_sessions_file on download_sessions (file_id, client);

-- Bundle info shows each file's downloads_remaining: a counted download is announced like a change to
-- the bundle (0006), so every process drops its cached copy.
create function sluice_file_downloads_changed() returns trigger language plpgsql as $$
begin
  perform pg_notify('sluice_bundle', new.bundle_id::text);
  return null;
end $$;

create trigger files_downloads_changed
  after update of downloads_done on files for each row execute function sluice_file_downloads_changed();
create trigger bundles_max_downloads_changed
  after update of max_downloads on bundles for each row execute function sluice_bundle_changed();
