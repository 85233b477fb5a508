/**
 * The MX's trust hooks (core/trust): at RCPT the envelope sender meets the recipient box's block lists; after
 * DATA the message is verified and scored once for all recipients, each box's lists and policy decide, refused
 * boxes are counted, and the accepted ones get the copy stamped with our Authentication-Results.
 */
import type { Config } from '@boxes/config';
import {
  checkEnvelopeSender,
  countRefused,
  inspectInbound,
  refusalsFor,
  stampRaw,
  type InboundTrust,
  type ListedRow,
  type RecipientResolution,
  type Refusal,
  type Services,
} from '@boxes/core';
import type { Box } from '@boxes/db';

/** Per SMTP session: the list rows read at RCPT time, by box id (reused after DATA when the From header is the envelope sender). */
export type RcptRows = Map<string, ListedRow[]>;

export async function rcptRefusal(svc: Services, rows: RcptRows, box: Box, mailFrom: string | null, known?: ListedRow[] | null): Promise<Refusal | null> {
  const checked = await checkEnvelopeSender(svc.db, box, mailFrom, known);
  rows.set(box.id, checked.rows);
  if (checked.refusal) await countRefused(svc.db, [box.id]);
  return checked.refusal;
}

export interface DataDecision {
  /** The recipients to store for (refused boxes removed). */
  recipients: RecipientResolution[];
  raw: Buffer;
  trust: InboundTrust | null;
  /** Set when every box recipient refused the message and nothing else is to be done: answer it. */
  refusal: Refusal | null;
}

export async function decideAtData(
  svc: Services,
  config: Config,
  input: { raw: Buffer; recipients: RecipientResolution[]; mailFrom: string | null; ip: string | null; helo: string | null; rows: RcptRows },
): Promise<DataDecision> {
  const boxes = input.recipients.flatMap((r) => (r.kind === 'box' ? [r.box] : []));
  // Delivery reports to bounce addresses only: nothing of an inbox is at stake.
  if (!boxes.length) return { recipients: input.recipients, raw: input.raw, trust: null, refusal: null };
  const trust = await inspectInbound(config, svc.db, {
    raw: input.raw,
    ip: input.ip,
    helo: input.helo,
    mailFrom: input.mailFrom,
    recipients: boxes.map((b) => b.address),
  });
  const refusals = await refusalsFor(svc.db, boxes, trust, input.mailFrom, input.rows);
  if (refusals.size) await countRefused(svc.db, [...refusals.keys()]);
  const recipients = input.recipients.filter((r) => r.kind !== 'box' || !refusals.has(r.box.id));
  // One reply answers every recipient of an SMTP transaction: refuse only when no box takes the message.
  if (!recipients.length) return { recipients, raw: input.raw, trust, refusal: refusals.values().next().value ?? null };
  return { recipients, raw: stampRaw(input.raw, trust, config.mailHost), trust, refusal: null };
}
