-- The operator console's lists and searches (/admin/reports, /admin/bundles): each page is one index
-- range read from where the last page stopped (keyset paging), with 10^6 bundles and 10^5 reports.
-- Open reports come through reports_open (0012); bundles by owner key through bundles_api_key (0001);
-- by code and vanity through their unique indexes; all bundles, newest first, through the primary key.

-- Closed reports, most recently closed first, after the open ones.
create index reports_closed on reports (closed_at desc, id desc) where closed_at is not null;

-- A bundle's reports (its page, and a report's "other reports of this bundle").
create index reports_short_code on reports (short_code, id);

-- The bundles holding a file, a page at a time and each once. It serves every lookup files_sha256
-- (0012) served (block add finds the bundles holding a hash through it), so it replaces it: files
-- gain no second index to keep up on every upload.
create index files_sha256_bundle on files (sha256, bundle_id) where sha256 is not null;
drop index files_sha256;
