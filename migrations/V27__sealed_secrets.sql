-- Webhook secrets are sealed at rest (`src/secret.rs`): `ojs_webhook.secret` holds
-- `v1:<key id>:<base64 of nonce and ciphertext>`, XChaCha20-Poly1305 under the server's
-- OJS_SECRET_KEY with the subscription's id as associated data, so neither a reader of the
-- table nor a database dump sees a secret. A sealed 1,024-byte secret takes about 1,430 bytes.
-- Secrets stored in clear by an earlier release are sealed by the first server that starts with
-- a key (the server cannot do it here: the key is not the database's).

alter table ojs_webhook drop constraint ojs_webhook_secret_length;
alter table ojs_webhook add constraint ojs_webhook_secret_length
    check (octet_length(secret) between 1 and 2048);

comment on column ojs_webhook.secret is 'The HMAC-SHA256 key of X-OJS-Signature, sealed under the server''s OJS_SECRET_KEY (v1:<key id>:<base64>; see src/secret.rs), never in clear. Shown only in the answer that created the subscription.';
