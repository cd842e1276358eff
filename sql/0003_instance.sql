-- One random id per database: Redis keys are namespaced by it, so every process sharing this
-- database shares its counters, and a fresh database never inherits another's.
create table instance (
  singleton boolean primary key default true check (singleton),
  id        text not null
);
insert into instance (id) values (replace(gen_random_uuid()::text, '-', ''));
