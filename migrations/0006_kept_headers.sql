-- Headers of the mirror's answer that an ecosystem keeps with an entry and
-- sends with every answer for it (the Hugging Face hub's X-Repo-Commit,
-- X-Linked-Etag, …; an API page's Link): `name: value` lines.
ALTER TABLE entries ADD COLUMN kept_headers TEXT;
