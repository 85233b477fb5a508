/** Credit: balance, usage, alert thresholds, top-ups (card and MPP), payer email, and the outbound trailer. */
import { z } from 'zod';
import {
  AppError,
  buyOutTrailer,
  createCardTopup,
  createMppChallenge,
  creditBalance,
  creditUsage,
  getPayerEmail,
  getTrailer,
  optOutOfTrailer,
  paymentView,
  setAlertThresholds,
  setPayerEmail,
  waitForPayment,
} from '@boxes/core';
import {
  AlertThresholdsInput,
  AlertThresholdsOutput,
  AmountInput,
  CreditBalance,
  MppChallengeOutput,
  PayerEmailInput,
  PayerEmailOutput,
  PaymentIdInput,
  PaymentView,
  TopupOutput,
  TrailerBuyoutOutput,
  TrailerStatus,
  UsageInput,
  UsageOutput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const creditRouter = router({
  balance: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/credit/balance',
        tags: ['credit'],
        summary: 'Credit balance',
        description:
          'credit_balance_cents (may be negative), balance_state (ok, low, critical), the low-balance flag, emails the balance covers, free messages left (of 250) and trailer status. Any valid key.',
      },
    })
    .input(z.void())
    .output(CreditBalance)
    .query(({ ctx }) => creditBalance(ctx.svc, ctx.account.id)),
  usage: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/credit/usage',
        tags: ['credit'],
        summary: 'Usage by type',
        description:
          'Ledger entries grouped by type (charges negative, credits positive) in [since, before); without a window, all of them. Sums equal the ledger to the micro-dollar. Any valid key.',
      },
    })
    .input(UsageInput)
    .output(UsageOutput)
    .query(({ ctx, input }) => creditUsage(ctx.svc, ctx.account.id, input)),
  setAlertThresholds: keyProcedure
    .meta({
      accountWide: true,
      openapi: {
        method: 'PUT',
        path: '/account/credit/alert-thresholds',
        tags: ['credit'],
        summary: 'Set low-balance alert thresholds',
        description:
          'first_cents (early) and second_cents (urgent), in cents; null clears one. A charge that takes the balance below a threshold emits low_balance {alert: first|second} once per crossing (it re-arms when the balance is back above). Any valid key not restricted to boxes.',
      },
    })
    .input(AlertThresholdsInput)
    .output(AlertThresholdsOutput)
    .mutation(({ ctx, input }) => setAlertThresholds(ctx.svc, ctx.account.id, input)),
  topup: keyProcedure
    .meta({
      errors: ['card_declined'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/credit/topup',
        tags: ['credit'],
        summary: 'Card top-up (payment intent)',
        description:
          "Creates a payment intent for amount_cents. Within the owner's saved-card mandate caps ($5 per top-up and $10 per 30 days to start; 10/25 or 25/50 when raised) it settles at once; otherwise the owner gets a single-use approval link by email and the intent waits (24 h). 402 card_declined when the saved card is declined. Needs the admin scope.",
      },
    })
    .input(AmountInput)
    .output(TopupOutput)
    .mutation(({ ctx, input }) => createCardTopup(ctx.svc, ctx.account, input.amount_cents)),
  topupStatus: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/account/credit/topup/{id}',
        tags: ['credit'],
        summary: 'A card top-up',
        description:
          'Status of a payment intent (requires_approval, succeeded, denied, expired, failed); wait_seconds waits up to 25 s for a decision. Any valid key.',
      },
    })
    .input(PaymentIdInput)
    .output(PaymentView)
    .query(async ({ ctx, input }) => paymentView(ctx.svc, await waitForPayment(ctx.svc, ctx.account.id, input.id, 'card', (input.wait_seconds ?? 0) * 1000))),
  mpp: keyProcedure
    .meta({
      errors: ['wallet_not_enrolled'],
      openapi: {
        method: 'POST',
        path: '/account/credit/topup/mpp',
        tags: ['credit'],
        summary: 'MPP top-up (Machine Payments Protocol challenge)',
        description:
          "Creates a challenge with a 15-minute TTL and a wallet spend request (pending_approval) that the owner approves from a single-use emailed link. About 3 s after approval a shared payment token attaches and the credit lands. Approval does not reset the TTL. 402 wallet_not_enrolled when the payer's wallet has no card (the owner is emailed an enrollment link). If the payer lookup fails, preflight.payer_email is null and the top-up proceeds with the default. Any valid key.",
      },
    })
    .input(AmountInput)
    .output(MppChallengeOutput)
    .mutation(({ ctx, input }) => createMppChallenge(ctx.svc, ctx.account, input.amount_cents)),
  mppStatus: keyProcedure
    .meta({
      errors: ['card_declined', 'mpp_challenge_expired', 'not_found'],
      openapi: {
        method: 'GET',
        path: '/account/credit/topup/mpp/{id}',
        tags: ['credit'],
        summary: 'Wait for an MPP top-up',
        description:
          'The final step: waits (wait_seconds, up to 25) while the spend request is pending_approval or approved without its token, then returns it: succeeded (token set, credit landed) or denied. 402 mpp_challenge_expired when the challenge lapsed, 402 card_declined (with decline_code) when the card was declined. Any valid key.',
      },
    })
    .input(PaymentIdInput)
    .output(PaymentView)
    .query(async ({ ctx, input }) => {
      const p = await waitForPayment(ctx.svc, ctx.account.id, input.id, 'mpp', (input.wait_seconds ?? 0) * 1000);
      const view = paymentView(ctx.svc, p);
      if (p.status === 'expired') {
        throw new AppError(
          'mpp_challenge_expired',
          'The challenge expired (15 minutes) before the payment completed; approval does not extend it. Start a new top-up with POST /account/credit/topup/mpp.',
          { payment: view },
        );
      }
      if (p.status === 'failed') {
        throw new AppError(
          'card_declined',
          `The card in the payer's wallet was declined (${p.declineCode}). Ask the owner to update the card, then start a new top-up.`,
          { decline_code: p.declineCode, payment: view },
        );
      }
      return view;
    }),
  getPayerEmail: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/credit/payer-email',
        tags: ['credit'],
        summary: 'Payer email',
        description: "The payment customer's email, or the owner's email (is_default) when no customer exists. Any valid key.",
      },
    })
    .input(z.void())
    .output(PayerEmailOutput)
    .query(({ ctx }) => getPayerEmail(ctx.svc, ctx.account)),
  setPayerEmail: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'PUT',
        path: '/account/credit/payer-email',
        tags: ['credit'],
        summary: 'Set the payer email',
        description:
          "Updates the payment customer's email, creating the customer if none exists; emits account.credit.payer_email_updated. Needs the admin scope.",
      },
    })
    .input(PayerEmailInput)
    .output(PayerEmailOutput)
    .mutation(({ ctx, input }) => setPayerEmail(ctx.svc, ctx.account, input.email)),
  trailer: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/trailer',
        tags: ['credit'],
        summary: 'Trailer status',
        description: 'Whether sent messages carry the trailer, and what remains of the opt-out surcharge. Any valid key.',
      },
    })
    .input(z.void())
    .output(TrailerStatus)
    .query(({ ctx }) => getTrailer(ctx.svc, ctx.account.id)),
  optOutOfTrailer: keyProcedure
    .meta({
      errors: ['not_found'],
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/trailer',
        tags: ['credit'],
        summary: 'Opt out of the trailer',
        description:
          'Sent messages stop carrying the trailer; each pays a surcharge ($0.001) until $5 in total is paid (or POST /account/trailer/buyout). Repeating it changes nothing. Any valid key not restricted to boxes.',
      },
    })
    .input(z.void())
    .output(TrailerStatus)
    .mutation(({ ctx }) => optOutOfTrailer(ctx.svc, ctx.account.id)),
  buyOutTrailer: keyProcedure
    .meta({
      errors: ['not_found', 'payment_required'],
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/trailer/buyout',
        tags: ['credit'],
        summary: 'Buy out the trailer surcharge',
        description:
          'Charges what remains of the opt-out surcharge at once (and opts out if not yet); 402 without the credit for it. Any valid key not restricted to boxes.',
      },
    })
    .input(z.void())
    .output(TrailerBuyoutOutput)
    .mutation(({ ctx }) => buyOutTrailer(ctx.svc, ctx.account.id)),
});
