-- Files stored while nothing was blocked and scanning was off have no SHA-256. While the blocklist holds
-- anything they are read and hashed in the background (abuse/backfill.ts), walking them by id through this
-- index, which holds only the files not hashed yet.
create index files_unhashed on files (id) where sha256 is null;
