-- A deferred-length append reserves room in its bundle before each PATCH streams (what the PATCH may
-- bring it to), under the bundle's row lock, so two such uploads can never both write past the room
-- and then both fail to complete. The PATCH's end sets it back to 0: the upload then holds what it received.
alter table tus_uploads add column reserved_bytes bigint not null default 0 check (reserved_bytes >= 0);

-- A reservation's change is a change of the bundle's room (0011).
create trigger tus_deferred_reserved
  after update of reserved_bytes on tus_uploads
  for each row when (new.bundle_id is not null and new.upload_length is null)
  execute function sluice_tus_reservation_changed();
