-- The console overview's cluster-wide figures, one row a minute: the first node to insert a minute's
-- row reads the tables (one pass over bundles, the open reports by their index) and fills it in; every
-- node's console reads the rows. A day and an hour are kept. Null figures: the sample did not finish.
create table console_samples (
  at           timestamptz primary key,
  live_bundles bigint,
  stored_bytes bigint,
  open_reports bigint
);
