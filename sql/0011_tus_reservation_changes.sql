-- What unfinished tus uploads reserve in a bundle is part of its cached info (the room `/status`
-- reports), so a change to a reservation is announced on `sluice_bundle` like a change to the bundle.
-- A deferred-length upload reserves what it has received so far, so its progress is announced too.
create function sluice_tus_reservation_changed() returns trigger language plpgsql as $$
begin
  if tg_op = 'DELETE' then
    if old.bundle_id is not null then
      perform pg_notify('sluice_bundle', old.bundle_id::text);
    end if;
  elsif new.bundle_id is not null then
    perform pg_notify('sluice_bundle', new.bundle_id::text);
  end if;
  return null;
end $$;

create trigger tus_reservations_changed
  after insert or delete or update of bundle_id, upload_length, completed_at, expires_at
  on tus_uploads for each row execute function sluice_tus_reservation_changed();

create trigger tus_deferred_progress
  after update of upload_offset on tus_uploads
  for each row when (new.upload_length is null) execute function sluice_tus_reservation_changed();
