-- Every change to what a bundle's public info shows is announced on channel `sluice_bundle` (payload:
-- the bundle id), whoever makes it: a server worker, the CLI, the sweeper, an operator's psql. Server
-- processes cache bundle info and drop their copy on the announcement. Files never change in place:
-- an append or a file delete also updates the bundle's totals, so a trigger on bundles sees them all.
-- view_count (bumped by page views) is left out on purpose: the info does not show it.
create function sluice_bundle_changed() returns trigger language plpgsql as $$
begin
  if tg_op = 'DELETE' then
    perform pg_notify('sluice_bundle', old.id::text);
  else
    perform pg_notify('sluice_bundle', new.id::text);
  end if;
  return null;
end $$;

create trigger bundles_changed
  after update of short_code, upload_token_hash, description, access_password_hash, notify_email, is_encrypted,
                  api_key_id, max_size_bytes, total_size_bytes, file_count, created_at, expires_at
     or delete
  on bundles for each row execute function sluice_bundle_changed();
