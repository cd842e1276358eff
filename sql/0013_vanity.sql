-- Vanity names of Premium bundles: `/<vanity>` serves what `/<short_code>` serves. Unique without
-- regard to case. A deleted bundle frees its name with its row; an expired one keeps the row until
-- the sweeper removes it, so whoever claims the name next clears it from the expired row first.
alter table bundles add column vanity text check (vanity ~ '^[A-Za-z0-9][A-Za-z0-9_-]{2,47}$');
create unique index bundles_vanity on bundles (lower(vanity));

-- Cached bundle info carries the name: announce its changes like the other columns (0006).
create trigger bundles_vanity_changed
  after update of vanity on bundles for each row execute function sluice_bundle_changed();
