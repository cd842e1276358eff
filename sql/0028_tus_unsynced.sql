-- A PATCH may put its new offset on record while its last bytes are still being synced (src/tus/unsynced.ts).
-- Until that sync is known done, the row names where that range starts and its CRC-32: whoever next
-- takes the upload without knowing the sync finished (after a crash, a restart, on another node) checks
-- the range against it, and keeps it or drops it.
alter table tus_uploads
  add column unsynced_from bigint,
  add column unsynced_crc bigint,
  add constraint tus_unsynced_range check (
    (unsynced_from is null and unsynced_crc is null)
    or (unsynced_from >= 0 and unsynced_from < upload_offset and unsynced_crc between 0 and 4294967295));
