/** Who really sent a message (authentication), spam verdicts, allow and block lists, a box's receiving policy. */
import { z } from 'zod';
import { Timestamp } from './common';

export const Authentication = z
  .object({
    spf: z
      .object({
        result: z.string().meta({ description: 'pass, fail, softfail, neutral, none, temperror or permerror', example: 'pass' }),
        domain: z.string().nullable().meta({ description: 'The envelope sender domain SPF checked', example: 'example.com' }),
        client_ip: z.string().nullable().meta({ description: 'The SMTP client address', example: '203.0.113.7' }),
      })
      .meta({ description: 'SPF (RFC 7208) of the envelope sender' }),
    dkim: z
      .array(
        z.object({
          domain: z.string().meta({ description: 'The signing domain (d=)', example: 'example.com' }),
          selector: z.string().meta({ description: 'The key selector (s=)', example: 'mail' }),
          result: z.string().meta({ description: 'pass, fail, neutral, policy, temperror or permerror', example: 'pass' }),
          aligned: z.boolean().meta({ description: 'A passing signature whose domain aligns with the From domain', example: true }),
          comment: z
            .string()
            .nullable()
            .meta({ description: 'Why it did not pass (a signature over changed content says "body hash did not verify" with result neutral)', example: null }),
        }),
      )
      .meta({ description: 'Each DKIM signature (RFC 6376); empty when the message is not signed' }),
    dmarc: z
      .object({
        result: z.string().meta({ description: 'pass, fail, none, temperror or permerror', example: 'pass' }),
        policy: z.string().nullable().meta({ description: "The From domain's published policy: none, quarantine or reject", example: 'reject' }),
        from_domain: z.string().nullable().meta({ description: 'The From header domain', example: 'example.com' }),
        alignment: z
          .object({
            spf: z.boolean().meta({ description: 'SPF passed for a domain aligned with From', example: false }),
            dkim: z.boolean().meta({ description: 'A DKIM signature passed for a domain aligned with From', example: true }),
          })
          .meta({ description: 'Which mechanisms aligned with the From domain' }),
      })
      .meta({ description: 'DMARC (RFC 7489) of the From domain' }),
    arc: z
      .object({
        result: z.string().meta({ description: 'pass, fail or none (no ARC chain)', example: 'none' }),
        instance: z.number().int().meta({ description: 'The highest ARC instance (i=) on the message; 0 without ARC', example: 0 }),
        sealer: z.string().nullable().meta({ description: 'The domain that sealed the newest ARC set (a forwarder or list)', example: null }),
      })
      .meta({ description: 'ARC (RFC 8617): forwarders and lists that vouch for what they received' }),
    sender_verified: z.boolean().meta({
      description: 'true when DMARC passed: the From domain is aligned with a passing DKIM signature or SPF. The one field to act on.',
      example: true,
    }),
    checked_by: z
      .string()
      .meta({ description: 'This instance (the authserv-id of the Authentication-Results header on the stored message)', example: 'mail.boxes.localhost' }),
  })
  .meta({ id: 'Authentication', description: 'What the MX verified when the message arrived; null on sent messages' });

export const SpamVerdict = z
  .object({
    verdict: z.enum(['spam', 'ham']).meta({ description: "spam when rspamd's action was reject, rewrite subject or add header", example: 'ham' }),
    score: z.number().meta({ description: "rspamd's score", example: 1.2 }),
    required_score: z.number().meta({ description: "rspamd's threshold for reject", example: 15 }),
    action: z.string().meta({ description: "rspamd's action", example: 'no action' }),
    symbols: z.array(z.string()).meta({ description: 'Matched rules, highest score first (at most 20)', example: ['MIME_GOOD', 'R_SPF_ALLOW'] }),
  })
  .meta({ id: 'SpamVerdict', description: 'rspamd scoring when the instance runs it (RSPAMD_URL); null when it does not, or did not answer' });

export const ListName = z.enum(['allow', 'block']).meta({ description: 'allow or block', example: 'block' });
export const ListDirection = z
  .enum(['receive', 'send', 'both'])
  .meta({ description: 'Whether the entry applies to mail received, mail sent, or both', example: 'receive' });

export const ListEntry = z
  .object({
    id: z.string().meta({ description: 'The entry', example: 'tle_0a1b2c3d4e5f6g7h8j9k' }),
    list: ListName,
    direction: ListDirection,
    value: z.string().meta({ description: 'A lower-case address, or a domain (covers its subdomains)', example: 'spammer.example' }),
    kind: z.enum(['address', 'domain']).meta({ description: 'Whether value is one address or a whole domain', example: 'domain' }),
    box_id: z.string().nullable().meta({ description: 'The box the entry applies to; null: every box of the account', example: null }),
    note: z.string().nullable().meta({ description: 'Your own note', example: 'phishing since November' }),
    created_at: Timestamp,
  })
  .meta({ id: 'ListEntry', description: 'An allow or block list entry' });

export const ListEntriesInput = z.strictObject({
  box: z.string().max(320).optional().meta({ description: "Only this box's entries (id or address)", example: 'billing@brave-otter.boxes.localhost' }),
  list: ListName.optional(),
  direction: ListDirection.optional(),
});
export const ListEntriesOutput = z.object({ entries: z.array(ListEntry) });

export const AddListEntryInput = z.strictObject({
  list: ListName,
  direction: ListDirection.default('both'),
  value: z.string().min(3).max(320).meta({
    description: 'An address (name@example.com) or a domain (example.com, @example.com or *.example.com: the domain and its subdomains)',
    example: 'spammer.example',
  }),
  box: z.string().max(320).optional().meta({
    description: 'A box id or address: the entry applies to it alone. Omitted: to every box of the account (needs a key not restricted to boxes).',
    example: 'billing',
  }),
  note: z.string().max(500).optional().meta({ description: 'Your own note', example: 'phishing since November' }),
});
export const AddListEntryOutput = ListEntry.extend({
  created: z.boolean().meta({ description: 'false when the same entry existed: it is returned unchanged', example: true }),
});
export const ListEntryIdInput = z.strictObject({ id: z.string().max(40).meta({ example: 'tle_0a1b2c3d4e5f6g7h8j9k' }) });

export const BoxPolicy = z
  .object({
    box_id: z.string().meta({ description: 'The box', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
    address: z.string().meta({ description: 'Its address', example: 'agent@brave-otter.boxes.localhost' }),
    receive_mode: z.enum(['open', 'allow_list']).meta({
      description: 'open: anyone not blocked may write; allow_list: only senders (From header) on an allow list of the box or the account',
      example: 'open',
    }),
    require_verified_sender: z.boolean().meta({
      description: 'With allow_list: a listed sender is accepted only when authentication.sender_verified is true (a forged From is refused)',
      example: false,
    }),
    spam_action: z
      .enum(['label', 'refuse'])
      .meta({ description: 'What an rspamd spam verdict does: label (stored with spam.verdict spam) or refuse (550 at DATA)', example: 'label' }),
    refused_count: z.number().int().meta({ description: 'Messages refused by lists or policy: never stored, never charged', example: 0 }),
    last_refused_at: Timestamp.nullable(),
  })
  .meta({ id: 'BoxPolicy', description: "A box's receiving policy" });

export const SetBoxPolicyInput = z.strictObject({
  id: z.string().max(40).meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
  receive_mode: z.enum(['open', 'allow_list']).optional().meta({ example: 'allow_list' }),
  require_verified_sender: z.boolean().optional().meta({ example: true }),
  spam_action: z.enum(['label', 'refuse']).optional().meta({ example: 'refuse' }),
});
