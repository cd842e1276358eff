-- File ids are public (/api/v1/download/<id>, /d/<id>): new ones are random in 1 … 2^53−1, so they are
-- exact in JSON and no one lists files by counting. Ids issued before keep working. `seq` keeps the
-- order files were added in (listings, zips, pages of a bundle's files), from the sequence ids came from.
alter table files add column seq bigint;
update files set seq = id;
alter table files alter column seq set default nextval('files_id_seq'), alter column seq set not null;
alter sequence files_id_seq owned by files.seq;
alter table files alter column id set default (1 + floor(random() * 9007199254740990))::bigint;
create index files_bundle_seq on files (bundle_id, seq);
drop index files_bundle;
