-- A vanity name its bundle let go of (renamed, named off, expired, deleted) stays its key's for 30 days
-- from when it stopped serving: a link someone saved never starts serving another key's files at once.
-- The trigger is the one place a name is freed, whichever path frees it.
create table vanity_holds (
  name        text primary key,            -- lower(vanity)
  api_key_id  bigint not null references api_keys (id) on delete cascade,
  held_until  timestamptz not null
);

create function sluice_vanity_freed() returns trigger language plpgsql as $$
begin
  if old.vanity is not null and old.api_key_id is not null
     and (tg_op = 'DELETE' or new.vanity is null or lower(new.vanity) <> lower(old.vanity)) then
    insert into vanity_holds (name, api_key_id, held_until)
    values (lower(old.vanity), old.api_key_id, least(coalesce(old.expires_at, now()), now()) + interval '30 days')
    on conflict (name) do update set api_key_id = excluded.api_key_id, held_until = excluded.held_until;
  end if;
  return null;
end $$;

create trigger bundles_vanity_freed
  after update of vanity or delete on bundles for each row execute function sluice_vanity_freed();
