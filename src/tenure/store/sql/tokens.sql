-- Named queries of the cluster credential and of ending every token (tenure/pod/tokens.py, ADR 0048).


-- name: cluster_credential_get
SELECT token_id, secret FROM cluster_credential WHERE one = 1;

-- name: cluster_credential_insert
-- The first pod's credential; another pod that provisions at the same moment keeps the row it finds.
INSERT INTO cluster_credential (one, token_id, secret, created_at) VALUES (1, :id, :s, {now})
ON CONFLICT (one) DO NOTHING;

-- name: cluster_credential_replace
UPDATE cluster_credential SET token_id = :id, secret = :s, created_at = {now} WHERE one = 1;

-- name: cluster_credential_delete
DELETE FROM cluster_credential;

-- name: api_tokens_delete_all
-- Every token, revoked ones too: the API is open again (on loopback) once no token was ever created.
DELETE FROM api_tokens;
