-- The operator console's lists, newest first and paged by key (never by offset), stay an index walk
-- however long the tables grow. api_keys and the unfiltered audit trail page on their primary keys.

-- The blocklist, newest first: (created_at, sha256) is unique, so it is the page key.
create index blocked_hashes_created on blocked_hashes (created_at, sha256);

-- The audit trail filtered by action or by operator, newest first.
create index audit_action_id on audit (action, id);
create index audit_operator_id on audit (operator, id);
