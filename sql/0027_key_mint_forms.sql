-- The console's mint form that made a key, if one did. The answer to that form shows the key once; a
-- reload of the answer sends the same form again, which must find this key instead of minting another.
alter table api_keys add column mint_form text unique;
