-- The owner key of a signup goes out once. While a webhook POST that carries it is on its way, the claim must
-- neither hand it out too nor call it gone (the POST may still fail): api_key_sending_at marks that time.
ALTER TABLE "signup_intents" ADD COLUMN "api_key_sending_at" TIMESTAMPTZ(3);
