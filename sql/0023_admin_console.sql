-- The operator console's sign-in: one-time links printed by `sluice admin link`, and the sessions
-- they start. Both secrets are stored as SHA-256 hashes only; the session cookie is also signed
-- with SECRET, so every node of a cluster can check it.
create table admin_links (
  id bigserial primary key,
  token_hash bytea not null unique,
  label text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  used_at timestamptz
);

create table admin_sessions (
  id bigserial primary key,
  secret_hash bytea not null,
  label text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  revoked_at timestamptz,
  last_seen_at timestamptz
);
