-- Sealed columns (every column named *_enc: AES-256-GCM ciphertext, as bytes or base64 text) are never compressed:
-- ciphertext does not compress. With the default storage (EXTENDED) PostgreSQL tried to compress each large value
-- before moving it out of line, and gave up after scanning its first kilobyte for repeats, on every insert and every
-- update that wrote one: a received message's body and raw bytes, a sent message's signed bytes, a draft's, an
-- attachment's text, a bulk item's body, a held send's request, an account export. EXTERNAL moves a large value out
-- of line without the attempt. 5,000 rows with a 3 KB sealed text and a 1.1 KB sealed bytea took 241 to 258 ms to
-- insert with EXTENDED, 83 to 114 ms with EXTERNAL. The small ones (keys, secrets) never leave their row either way;
-- they are EXTERNAL too so that one rule holds for every sealed column (a test checks it). Values stored before keep
-- their form (they were never compressed either: every attempt failed).
ALTER TABLE "messages" ALTER COLUMN "body_enc" SET STORAGE EXTERNAL, ALTER COLUMN "raw_enc" SET STORAGE EXTERNAL;
ALTER TABLE "drafts" ALTER COLUMN "body_enc" SET STORAGE EXTERNAL, ALTER COLUMN "raw_enc" SET STORAGE EXTERNAL;
ALTER TABLE "message_attachments" ALTER COLUMN "text_enc" SET STORAGE EXTERNAL;
ALTER TABLE "bulk_job_items" ALTER COLUMN "body_enc" SET STORAGE EXTERNAL;
ALTER TABLE "send_reviews" ALTER COLUMN "request_enc" SET STORAGE EXTERNAL;
ALTER TABLE "account_exports" ALTER COLUMN "archive_enc" SET STORAGE EXTERNAL, ALTER COLUMN "token_enc" SET STORAGE EXTERNAL;
ALTER TABLE "accounts" ALTER COLUMN "webhook_secret_enc" SET STORAGE EXTERNAL, ALTER COLUMN "webhook_secret_prev_enc" SET STORAGE EXTERNAL;
ALTER TABLE "audit_signing_keys" ALTER COLUMN "private_key_enc" SET STORAGE EXTERNAL;
ALTER TABLE "domains" ALTER COLUMN "dkim_private_key_enc" SET STORAGE EXTERNAL;
ALTER TABLE "signup_intents" ALTER COLUMN "api_key_enc" SET STORAGE EXTERNAL;
ALTER TABLE "webhook_endpoints" ALTER COLUMN "headers_enc" SET STORAGE EXTERNAL, ALTER COLUMN "secret_enc" SET STORAGE EXTERNAL,
  ALTER COLUMN "secret_prev_enc" SET STORAGE EXTERNAL;
