-- A funded or register signup completes when the owner pays, with no confirm call. Its API key now goes out
-- through whichever comes first: signup.completed at the callback webhook, or the intent's claim (POST
-- /signup/agentic/claim with the claim_secret returned at intent creation). One sealed copy serves both.
ALTER TABLE "signup_intents" RENAME COLUMN "api_key_for_callback_enc" TO "api_key_enc";
ALTER TABLE "signup_intents" ADD COLUMN "claim_secret_hash" TEXT;
