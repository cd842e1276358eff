-- tus concatenation: 'partial' for a partial upload (never a file of its own; a final upload joins it),
-- the creation's Upload-Concat value ('final;<urls>') for a final upload, null for any other upload.
alter table tus_uploads add column concat text;
