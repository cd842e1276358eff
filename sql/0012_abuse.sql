-- Abuse handling: reports from visitors, quarantined bundles, a blocklist of file hashes and an audit
-- trail of operator actions.

-- A quarantined bundle answers 451 on every path, keeps its files as evidence and never expires
-- while quarantined (the sweeper skips it). null: not quarantined.
alter table bundles add column quarantined_at timestamptz;

-- Quarantine changes what every path answers: announce it like any other change to a bundle.
drop trigger bundles_changed on bundles;
create trigger bundles_changed
  after update of short_code, upload_token_hash, description, access_password_hash, notify_email, is_encrypted,
                  api_key_id, max_size_bytes, total_size_bytes, file_count, created_at, expires_at, quarantined_at
     or delete
  on bundles for each row execute function sluice_bundle_changed();

-- The code, not a foreign key: a report outlives a deleted bundle (it is the record of why).
create table reports (
  id            bigserial primary key,
  short_code    text not null,
  reason        text not null check (reason in ('malware', 'phishing', 'copyright', 'illegal', 'other')),
  details       text check (char_length(details) <= 4000),
  contact       text check (char_length(contact) <= 255),
  -- HMAC-SHA-256 (keyed by SECRET) of the reporter's address as budgets see it: repeat reporters can
  -- be told apart without keeping any address.
  reporter_hash bytea not null,
  created_at    timestamptz not null default now(),
  closed_at     timestamptz,
  -- set once the report went out in an ABUSE_EMAIL batch
  mailed_at     timestamptz
);
create index reports_open on reports (created_at) where closed_at is null;
create index reports_unmailed on reports (id) where mailed_at is null;

create table blocked_hashes (
  sha256     bytea primary key check (octet_length(sha256) = 32),
  reason     text,
  created_at timestamptz not null default now(),
  created_by text not null
);

create table audit (
  id       bigserial primary key,
  at       timestamptz not null default now(),
  action   text not null,
  target   text not null,
  operator text not null,
  detail   text
);
create index audit_at on audit (at);

-- `block add` finds the bundles already holding a hash through this.
create index files_sha256 on files (sha256) where sha256 is not null;
