/**
 * Agentic signup: an intent (POST /signup/agentic), then confirm, which provisions the account, its domain
 * with a DKIM key, the primary box agent@<domain> and the owner key in one transaction. A funded signup
 * (initial_credit_cents) or a registration has no confirm: it is provisioned when the owner pays
 * (payments/payments.ts), and its key goes out once, by whichever comes first: signup.completed at the callback
 * webhook (when there is one), or the claim (POST /signup/agentic/claim) with the claim_secret that only the
 * intent's creator was shown.
 */
import { randomBytes } from 'node:crypto';
import type { SignupIntent, Tx } from '@boxes/db';
import { Prisma } from '@boxes/db';
import { k, rows as sqlRows } from '@boxes/db';
import type { z } from 'zod';
import type { ClaimInput, ConfirmInput, EventDataInput, SignupInput } from '@boxes/schemas';
import { createBox } from '../boxes/boxes';
import { createDkimKey } from '../domains/dkim';
import { normalizeDomain, wordPair } from '../domains/names';
import { requiredRecords } from '../domains/records';
import { claimDeadline } from '../domains/verify';
import { ensureOwnZone, publishLiveDomain } from '../dns/zones';
import { appendEvent } from '../events/append';
import { mintKey } from '../keys/keys';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { constantTimeEqual, open, seal, sha256Hex } from '../shared/crypto';
import { checkCallbackUrl } from '../webhooks/url-guard';
import { createSignupPayment, refreshPayment } from '../payments/payments';
import { postEntries } from '../store/ledger';
import { centsToMicros } from '../credit/prices';
import type { DomainStatus, SignupIntentStatus } from '@boxes/schemas';

type DkimKey = Awaited<ReturnType<typeof createDkimKey>>;

export const INTENT_TTL_MS = 24 * 60 * 60 * 1000;
export const PRIMARY_LOCAL_PART = 'agent';

/** A free subdomain is taken by any account or pending signup that has it. */
async function subdomainInUse(svc: Services, name: string): Promise<boolean> {
  const [domain, intent] = await Promise.all([
    svc.db.domain.findFirst({ where: { name }, select: { id: true } }),
    svc.db.signupIntent.findFirst({
      where: { fullDomain: name, status: 'pending' satisfies SignupIntentStatus, expiresAt: { gt: svc.clock.now() } },
      select: { id: true },
    }),
  ]);
  return Boolean(domain || intent);
}

/**
 * The live domain that holds a name: the name itself, or a parent of it (a name inside another account's live
 * domain is that account's to serve; a claim on it would shadow the parent's records in the DNS served here).
 * Pending claims do not count: they do not block each other, and the first one proven wins.
 */
export async function liveDomainCovering(svc: Services, name: string): Promise<{ accountId: string; name: string } | null> {
  const labels = name.split('.');
  const names = labels.slice(0, -1).map((_, i) => labels.slice(i).join('.'));
  return svc.db.domain.findFirst({ where: { liveName: { in: names } }, select: { accountId: true, name: true } });
}

/**
 * Names someone may claim instead of a taken one, each checked to be free now: free subdomains built from the
 * taken name's first label (and a word pair), since a domain proven by another account cannot be claimed here.
 */
export async function domainSuggestions(svc: Services, taken: string): Promise<{ domain: string; mode: 'subdomain' }[]> {
  const label = (taken.split('.')[0] ?? 'agent').replace(/[^a-z0-9-]/g, '').slice(0, 40) || 'agent';
  const candidates = [
    `${label}.${svc.config.baseDomain}`,
    ...Array.from({ length: 6 }, () => `${label}-${wordPair().split('-')[1]}.${svc.config.baseDomain}`),
    `${wordPair()}.${svc.config.baseDomain}`,
  ];
  const out: { domain: string; mode: 'subdomain' }[] = [];
  for (const name of [...new Set(candidates)]) {
    if (out.length >= 3) break;
    if (normalizeDomain(name) && !(await subdomainInUse(svc, name))) out.push({ domain: name, mode: 'subdomain' });
  }
  return out;
}

async function pickSubdomain(svc: Services): Promise<string> {
  for (let i = 0; i < 20; i++) {
    const name = `${wordPair()}.${svc.config.baseDomain}`;
    if (!(await subdomainInUse(svc, name))) return name;
  }
  throw new AppError('service_unavailable', 'Could not find a free subdomain; try again');
}

type Funding = Awaited<ReturnType<typeof createSignupPayment>> & { claim_secret: string };

export async function createSignupIntent(svc: Services, input: z.infer<typeof SignupInput>): Promise<SignupIntent & { funding: Funding | null }> {
  const intent = input.domain_intent;
  let fullDomain: string;
  let registrationPriceCents: number | null = null;
  if (intent.mode === 'subdomain') {
    fullDomain = await pickSubdomain(svc);
  } else if (intent.mode === 'register') {
    const name = normalizeDomain(intent.register_domain ?? '');
    if (!name) {
      throw new AppError('validation_error', 'domain_intent.register_domain: must be a domain name such as my-agent.com', {
        fields: [{ path: 'domain_intent.register_domain', message: 'not a domain name' }],
      });
    }
    const quote = await svc.registrar.quote(svc.db, name);
    if (!quote.available || (await liveDomainCovering(svc, name))) {
      const offers = await svc.registrar.suggest(svc.db, name);
      throw new AppError(
        'domain_taken',
        `${name} cannot be registered: ${quote.available ? 'it is already live on another account here' : quote.reason} (${svc.registrar.label})`,
        {
          registrar: svc.registrar.label,
          suggestions: offers.map((o) => ({ domain: o.name, mode: 'register' as const, price_cents_per_year: o.priceCentsPerYear })),
        },
      );
    }
    fullDomain = name;
    registrationPriceCents = quote.priceCentsPerYear;
  } else {
    const name = normalizeDomain(intent.byo_domain ?? '');
    if (!name) {
      throw new AppError('validation_error', 'domain_intent.byo_domain: must be a domain name such as example.com or mail.example.com', {
        fields: [{ path: 'domain_intent.byo_domain', message: 'not a domain name' }],
      });
    }
    if (name === svc.config.baseDomain || name.endsWith(`.${svc.config.baseDomain}`)) {
      throw new AppError('validation_error', `domain_intent.byo_domain: ${name} is under this service's shared domain; use mode subdomain`, {
        fields: [{ path: 'domain_intent.byo_domain', message: 'under the shared domain' }],
      });
    }
    const holder = await liveDomainCovering(svc, name);
    if (holder) {
      throw new AppError(
        'domain_taken',
        holder.name === name
          ? `${name} is already verified by another account on this instance`
          : `${name} is inside ${holder.name}, which is live on another account of this instance`,
        {
          suggestions: await domainSuggestions(svc, name),
        },
      );
    }
    fullDomain = name;
  }
  const callbackWebhook = input.agent_callback_webhook
    ? await checkCallbackUrl(input.agent_callback_webhook, { allowPrivate: svc.config.webhook.allowPrivate })
    : null;
  // A signup that completes on payment has no confirm answer to carry its key: the claim does, to whoever
  // holds this secret (shown once, here). Only its hash is kept.
  const amount = (registrationPriceCents ?? 0) + (input.initial_credit_cents ?? 0);
  const claimSecret = amount > 0 ? `bxs_claim_${randomBytes(32).toString('base64url')}` : null;
  return svc.db.$transaction(async (tx) => {
    const created = await tx.signupIntent.create({
      data: {
        id: newId('int'),
        humanEmail: input.human_email.toLowerCase(),
        mode: intent.mode,
        fullDomain,
        callbackWebhook,
        initialCreditCents: input.initial_credit_cents ?? null,
        registrationPriceCents,
        claimSecretHash: claimSecret ? sha256Hex(claimSecret) : null,
        expiresAt: new Date(svc.clock.now().getTime() + INTENT_TTL_MS),
      },
    });
    // A funded signup pays its credit; a registration pays the first year plus any initial credit, approved
    // by the owner as a wallet spend request. Nothing is registered or charged before that approval.
    const funding = claimSecret
      ? { ...(await createSignupPayment(svc, tx, created, amount, { walletSpendRequest: registrationPriceCents !== null })), claim_secret: claimSecret }
      : null;
    return { ...created, funding };
  });
}

/** Work done before the provisioning transaction (an RSA key takes tens of milliseconds). */
export async function prepareProvisioning(svc: Services): Promise<DkimKey> {
  return createDkimKey(svc.secretKey);
}

/** Provisions a funded signup once its payment has cleared (no confirm call); returns the account id. */
export async function provisionFunded(svc: Services, tx: Tx, intentId: string, dkim: DkimKey): Promise<string> {
  const intent = await tx.signupIntent.findUniqueOrThrow({ where: { id: intentId } });
  if (intent.status === 'completed' && intent.accountId) return intent.accountId;
  const out = await provisionAccount(svc, tx, intent, dkim);
  return out.account_id;
}

export async function confirmSignup(svc: Services, input: z.infer<typeof ConfirmInput>) {
  // Cheap checks first: an unauthenticated caller must not make us generate RSA keys for unknown intents.
  const found = await svc.db.signupIntent.findUnique({ where: { id: input.intent_id }, select: { status: true } });
  if (!found) throw new AppError('not_found', `signup intent ${input.intent_id} not found`);
  // Work that needs no lock (an RSA key takes tens of milliseconds) happens before the transaction; the
  // transaction re-checks the intent under a row lock.
  const dkim = found.status === 'pending' ? await createDkimKey(svc.secretKey) : null;
  try {
    return await svc.db.$transaction(
      async (tx) => {
        const rows = await sqlRows(tx, k.selectFrom('signup_intents').select('id').where('id', '=', input.intent_id).forUpdate());
        if (!rows[0]) throw new AppError('not_found', `signup intent ${input.intent_id} not found`);
        const intent = await tx.signupIntent.findUniqueOrThrow({ where: { id: input.intent_id }, include: { account: true, payment: true } });
        if (intent.status === 'completed') {
          throw new AppError(
            'intent_already_confirmed',
            'This signup intent was already confirmed. The API key was shown once in that response; if it was lost, mint a new key with an admin key.',
            { primary_address: intent.account?.primaryAddress ?? null, account_id: intent.accountId },
          );
        }
        if (intent.expiresAt.getTime() < svc.clock.now().getTime()) {
          throw new AppError('intent_expired', 'This signup intent has expired; start again with POST /signup/agentic');
        }
        if (intent.payment) {
          throw new AppError(
            'funded_signup',
            'This signup is funded: it completes by itself when the owner approves the payment (no confirm call). Poll POST /signup/agentic/claim with the intent_id and the claim_secret from the signup answer; the API key comes in its answer once the payment clears (or in signup.completed at the callback webhook, if you gave one, whichever is first).',
            {
              payment_id: intent.payment.id,
              payment_status: intent.payment.status,
            },
          );
        }
        if (!dkim) throw new Error('unreachable: a pending intent always has a DKIM key prepared');
        return provisionAccount(svc, tx, intent, dkim);
      },
      { maxWait: 10_000, timeout: 20_000 },
    );
  } catch (err) {
    if (err instanceof Prisma.PrismaClientKnownRequestError && err.code === 'P2002') {
      const intent = await svc.db.signupIntent.findUnique({ where: { id: input.intent_id }, select: { fullDomain: true } });
      throw new AppError('domain_taken', 'The domain of this intent was taken by another account meanwhile; start again with POST /signup/agentic', {
        suggestions: intent ? await domainSuggestions(svc, intent.fullDomain) : [],
      });
    }
    throw err;
  }
}

/** Creates the account, its domain, agent@<domain> and the owner key for an intent; announces signup.completed. */
async function provisionAccount(svc: Services, tx: Tx, intent: SignupIntent, dkim: DkimKey) {
  const accountId = newId('acct');
  const primaryAddress = `${PRIMARY_LOCAL_PART}@${intent.fullDomain}`;
  // A free subdomain is ours to give and a registered domain was just registered for this account: live at once.
  const domainStatus = (
    intent.mode === 'subdomain' || intent.mode === 'register' ? 'active' : intent.mode === 'byo_delegated' ? 'pending_delegation' : 'pending_dns'
  ) satisfies DomainStatus;
  await tx.account.create({
    data: { id: accountId, humanEmail: intent.humanEmail, primaryAddress, callbackWebhook: intent.callbackWebhook },
  });
  const now = svc.clock.now();
  const live = domainStatus === 'active';
  const domain = await tx.domain.create({
    data: {
      id: newId('dom'),
      accountId,
      name: intent.fullDomain,
      // A free subdomain is ours to give: live at once. A bring-your-own domain is a claim until proven.
      liveName: live ? intent.fullDomain : null,
      mode: intent.mode,
      status: domainStatus,
      dkimSelector: dkim.selector,
      dkimPublicKey: dkim.publicKey,
      dkimPrivateKeyEnc: dkim.privateKeyEnc,
      verifiedAt: live ? now : null,
      claimExpiresAt: live ? null : claimDeadline(svc.config, now),
      nextCheckAt: live ? null : now,
    },
  });
  if (intent.mode === 'register')
    await registerDomain(svc, tx, { domainId: domain.id, name: domain.name, registrant: intent.humanEmail, priceCentsPerYear: intent.registrationPriceCents! });
  if (live) await publishLiveDomain(tx, svc.config, domain);
  // Resolvers following a new delegation ask this instance for the zone's NS: serve its SOA and NS at once.
  else if (intent.mode === 'byo_delegated') await ensureOwnZone(tx, svc.config, domain.name, 'delegated');
  await appendEvent({
    db: tx,
    accountId,
    type: 'signup.completed',
    data: {
      account_id: accountId,
      primary_address: primaryAddress,
      domain: domain.name,
      mode: intent.mode as EventDataInput<'signup.completed'>['mode'],
      account_status: 'active',
    },
  });
  if (domainStatus === 'active') {
    await appendEvent({ db: tx, accountId, type: 'domain.ready', data: { domain: domain.name } });
  } else if (intent.mode === 'byo_manual') {
    await appendEvent({
      db: tx,
      accountId,
      type: 'domain.dns_required',
      data: { domain: domain.name, records: requiredRecords(svc.config, domain), claim_expires_at: domain.claimExpiresAt?.toISOString() ?? null },
    });
  } else {
    await appendEvent({
      db: tx,
      accountId,
      type: 'domain.delegation_required',
      data: { domain: domain.name, nameservers: svc.config.nameservers, claim_expires_at: domain.claimExpiresAt?.toISOString() ?? null },
    });
  }
  const box = await createBox({ db: tx, accountId, address: PRIMARY_LOCAL_PART, isPrimary: true, domainId: domain.id });
  const { key, raw } = await mintKey({ db: tx, accountId, label: 'owner', scopes: ['send', 'receive', 'admin'], isOwner: true });
  await tx.signupIntent.update({
    where: { id: intent.id },
    data: {
      status: 'completed' satisfies SignupIntentStatus,
      accountId,
      confirmedAt: new Date(),
      // The key for signup.completed at the callback, or for the claim: kept sealed only until it is handed over.
      apiKeyEnc: intent.callbackWebhook || intent.claimSecretHash ? seal(svc.secretKey, raw) : null,
    },
  });
  return {
    account_id: accountId,
    primary_address: box.address,
    api_key: raw,
    key_id: key.id,
    account_status: 'active' as const,
    domain: domain.name,
    domain_status: domainStatus as 'active' | 'pending_dns' | 'pending_delegation',
  };
}

/** How long a claim poller waits before asking again while the owner has not paid. */
export const CLAIM_RETRY_SECONDS = 5;

/**
 * POST /signup/agentic/claim: the state of a funded or register signup to whoever holds its claim_secret, and,
 * once the owner has paid, the account with its API key, exactly once (the callback webhook, if there is one,
 * may have taken it first). An unknown intent and a wrong secret get the same 404.
 */
export async function claimSignup(svc: Services, input: z.infer<typeof ClaimInput>) {
  const notFound = () => new AppError('not_found', `No signup intent ${input.intent_id} with this claim_secret`);
  const intent = await svc.db.signupIntent.findUnique({ where: { id: input.intent_id }, include: { payment: { select: { id: true } } } });
  if (!intent?.claimSecretHash || !constantTimeEqual(intent.claimSecretHash, sha256Hex(input.claim_secret))) throw notFound();
  const base = { intent_id: intent.id, full_domain: intent.fullDomain };
  if (intent.status !== 'completed' || !intent.accountId) {
    // Lazily expires a payment whose time ran out, as its status page does.
    const p = intent.payment ? await refreshPayment(svc, intent.payment.id) : null;
    const status =
      !p || p.status === 'expired' ? 'expired' : p.status === 'denied' ? 'payment_denied' : p.status === 'failed' ? 'payment_failed' : 'pending_payment';
    return {
      ...base,
      status,
      payment: p ? { id: p.id, status: p.status, decline_code: p.declineCode } : null,
      retry_after_seconds: status === 'pending_payment' ? CLAIM_RETRY_SECONDS : null,
      account: null,
    } as const;
  }
  const accountId = intent.accountId;
  // A POST to the callback may be carrying the key right now: wait for it (it is either delivered, and the key
  // is gone, or it fails and the key is the claim's). A mark older than the webhook timeout is a worker that died
  // mid-POST; the key is then the claim's too.
  const sendingSince = new Date(Date.now() - svc.config.webhook.timeoutMs - 5_000);
  const sealed = await svc.db.$transaction(async (tx) => {
    const rows = await sqlRows(tx, k.selectFrom('signup_intents').select(['api_key_enc', 'api_key_sending_at']).where('id', '=', intent.id).forUpdate());
    const enc = rows[0]?.api_key_enc ?? null;
    const sending = rows[0]?.api_key_sending_at ?? null;
    if (enc && sending && sending > sendingSince) return 'sending' as const;
    if (enc) await tx.signupIntent.update({ where: { id: intent.id }, data: { apiKeyEnc: null, apiKeySendingAt: null } });
    return enc;
  });
  if (sealed === 'sending') {
    return { ...base, status: 'delivering_to_callback', payment: null, retry_after_seconds: CLAIM_RETRY_SECONDS, account: null } as const;
  }
  const [account, key, domain] = await Promise.all([
    svc.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { primaryAddress: true } }),
    svc.db.apiKey.findFirstOrThrow({ where: { accountId, isOwner: true }, orderBy: { createdAt: 'asc' }, select: { id: true } }),
    svc.db.domain.findFirstOrThrow({ where: { accountId, name: intent.fullDomain }, select: { name: true, status: true } }),
  ]);
  if (!sealed) {
    throw new AppError(
      'intent_already_confirmed',
      'The API key of this signup was already handed over, to an earlier claim or in signup.completed at the callback webhook; it is shown only once. Further keys are minted with it (POST /account/keys).',
      { primary_address: account.primaryAddress, account_id: accountId },
    );
  }
  return {
    ...base,
    status: 'completed',
    payment: null,
    retry_after_seconds: null,
    account: {
      account_id: accountId,
      primary_address: account.primaryAddress,
      api_key: open(svc.secretKey, sealed).toString('utf8'),
      key_id: key.id,
      account_status: 'active',
      domain: domain.name,
      domain_status: domain.status as 'active' | 'pending_dns' | 'pending_delegation',
    },
  } as const;
}

/** Registers a domain for an account (inside the provisioning transaction) and records the registration. */
export async function registerDomain(
  svc: Services,
  tx: Tx,
  r: { domainId: string; name: string; registrant: string; priceCentsPerYear: number },
): Promise<void> {
  const now = svc.clock.now();
  const quote = await svc.registrar.quote(tx, r.name);
  if (!quote.available) {
    throw new AppError(
      'domain_taken',
      `${r.name} was registered by someone else meanwhile (${svc.registrar.label}); nothing was charged. Start again with another name.`,
      {
        suggestions: (await svc.registrar.suggest(tx, r.name)).map((o) => ({
          domain: o.name,
          mode: 'register' as const,
          price_cents_per_year: o.priceCentsPerYear,
        })),
      },
    );
  }
  const { expiresAt } = await svc.registrar.register(tx, r.name, { years: 1, nameservers: svc.config.nameservers, registrant: r.registrant, now });
  await tx.domainRegistration.create({
    data: {
      id: newId('reg'),
      domainId: r.domainId,
      name: r.name,
      registrar: svc.registrar.id,
      priceCentsPerYear: r.priceCentsPerYear,
      registeredAt: now,
      expiresAt,
    },
  });
}

/** After a registration's payment landed as credit: the first year is charged from it (ledger domain_registration). */
export async function chargeRegistration(svc: Services, tx: Tx, intentId: string, accountId: string): Promise<void> {
  const intent = await tx.signupIntent.findUniqueOrThrow({ where: { id: intentId }, select: { mode: true, fullDomain: true, registrationPriceCents: true } });
  if (intent.mode !== 'register' || intent.registrationPriceCents === null) return;
  const reg = await tx.domainRegistration.findFirstOrThrow({ where: { name: intent.fullDomain, domain: { accountId } } });
  await postEntries(svc, tx, accountId, [
    {
      type: 'domain_registration',
      amountMicros: -centsToMicros(intent.registrationPriceCents),
      idempotencyKey: `domain_registration:${reg.id}`,
      quantity: 1n,
      description: `${intent.fullDomain}: registration for one year, until ${reg.expiresAt.toISOString().slice(0, 10)} (${svc.registrar.label})`,
    },
  ]);
  await appendEvent({
    db: tx,
    accountId,
    type: 'domain.registered',
    data: {
      domain: intent.fullDomain,
      registrar: svc.registrar.label,
      expires_at: reg.expiresAt.toISOString(),
      price_cents_per_year: intent.registrationPriceCents,
    },
  });
}
