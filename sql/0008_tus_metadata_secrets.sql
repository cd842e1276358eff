-- tus uploads kept their Upload-Metadata as sent, so a row held a new bundle's password (base64) or the
-- upload token of the bundle it appends to, and HEAD echoed them to anyone with the upload's URL. New rows
-- keep only the other pairs (storableMetadata in src/tus/protocol.ts); this removes the two keys from rows
-- written before. (Their bundles were created with the password hashed and the token already matched.) Pairs
-- were accepted with white space around them (JavaScript's trim): it is trimmed here too.
update tus_uploads
set metadata = coalesce(
  (select string_agg(regexp_replace(pair, '^\s+|\s+$', '', 'g'), ',' order by n)
   from unnest(string_to_array(metadata, ',')) with ordinality as p(pair, n)
   where split_part(regexp_replace(pair, '^\s+|\s+$', '', 'g'), ' ', 1) not in ('access_password', 'upload_token')),
  '')
where metadata ~ '(^|,)\s*(access_password|upload_token)( |,|$)';
