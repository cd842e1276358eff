-- A partial upload spent by a final upload names it, so the same final request repeated (a client
-- that lost the first answer) gets the first answer again instead of "already joined".
alter table tus_uploads add column joined_into text;
