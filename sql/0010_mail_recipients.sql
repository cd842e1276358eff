-- Notification mail per recipient address, which an uploader chooses and nobody verifies. Addresses
-- are kept as SHA-256 of their trimmed, lower-cased text, never in clear.

-- Addresses that used the unsubscribe link: no download notification goes to them any more.
create table mail_unsubscribes (
  address_key  bytea primary key,
  at           timestamptz not null default now()
);

-- Notification mails queued per address and UTC day, across all bundles: the daily cap.
create table mail_address_days (
  address_key  bytea not null,
  day          date not null,
  sent         integer not null,
  primary key (address_key, day)
);

-- A download of the whole bundle as a zip: how many files it held (null: one file, named by `what`).
alter table download_events add column zip_files integer;
