-- Uploads no longer compute a SHA-256 of their content (it cost a quarter of the server's CPU during
-- large uploads and served only as the download ETag, which now derives from the file's row). The
-- column stays for the files that have one and for a process of the previous release still running
-- beside this one during an upgrade (it writes the column); new rows leave it null.
alter table files alter column sha256 drop not null;
