-- A project's autosave policy (ADR 0042): checkpoint the running project through its change journal at most
-- every `autosave` seconds when its folder changed; 0 turns it off; NULL follows the pod's default
-- (`tenure serve --autosave`).

ALTER TABLE projects ADD COLUMN autosave DOUBLE PRECISION;
