/**
 * POST /messages/{id}/reply: a reply (or reply-all) to a stored message, sent through sendMessage so the same
 * send rules, billing, evidence and idempotency apply. What the reply adds: the recipients (Reply-To, else
 * From; the original To and Cc for reply-all), a "Re:" subject that never stacks, In-Reply-To and References,
 * the optional quoted text, the sending box (the one that received the original) and the original's context.
 */
import addressparser from 'nodemailer/lib/addressparser';
import type { Message } from '@boxes/db';
import type { MessageReplyInput, SendInput } from '@boxes/schemas';
import type { z } from 'zod';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { escapeHtml } from '../shared/html';
import { openBody, type StoredBody } from './body';
import { formatMailbox, isAddress, type Mailbox } from './addresses';
import { sendMessage, type SendCaller, type SendOrHeld } from './send';
import { visibleMessage, WITHOUT_RAW, type MessageRead } from './read';

type Input = z.infer<typeof MessageReplyInput>;

/** Already a reply: Re:, RE:, Re[2]:, and the common translations (Aw:, Sv:, Antw:). */
const REPLY_PREFIX = /^\s*(re|aw|sv|antw|vs)(\[\d+\])?\s*:/i;

export function replySubject(subject: string | null): string {
  const s = (subject ?? '').trim();
  return REPLY_PREFIX.test(s) ? s : `Re: ${s}`.trimEnd();
}

/** At most this many Message-IDs in References: the first (the thread's root) and the newest. */
const MAX_REFERENCES = 20;

export function replyReferences(parent: Pick<Message, 'references' | 'rfcMessageId'>): string[] {
  const all = [...parent.references.filter((r) => r !== parent.rfcMessageId), parent.rfcMessageId];
  if (all.length <= MAX_REFERENCES) return all;
  return [all[0]!, ...all.slice(all.length - (MAX_REFERENCES - 1))];
}

/** Mailboxes of a raw address header (Reply-To, To, Cc of a received message), invalid entries left out. */
function headerMailboxes(value: string | undefined): Mailbox[] {
  if (!value) return [];
  return addressparser(value, { flatten: true })
    .filter((a) => a.address && isAddress(a.address))
    .map((a) => ({ name: a.name || undefined, address: a.address.toLowerCase() }));
}

/** A header of a received message's stored headers (mailparser keys them in lower case). */
const header = (body: StoredBody | null, name: string): string | undefined => body?.headers[name] ?? body?.headers[name.toLowerCase()];

function recipientsOf(parent: MessageRead, body: StoredBody | null, replyAll: boolean, self: string): { to: Mailbox[]; cc: Mailbox[] } {
  const bare = (list: string[]) => list.map((address) => ({ name: undefined, address }));
  let to: Mailbox[];
  let cc: Mailbox[] = [];
  if (parent.direction === 'sent') {
    // A follow-up to our own message goes to the same people.
    to = bare(parent.toAddresses);
    if (replyAll) cc = bare(parent.ccAddresses);
  } else {
    const replyTo = headerMailboxes(header(body, 'Reply-To'));
    const from = headerMailboxes(header(body, 'From'));
    to = replyTo.length ? replyTo : from.length ? from : parent.fromAddress ? bare([parent.fromAddress]) : [];
    if (replyAll) {
      const shown = [...headerMailboxes(header(body, 'To')), ...headerMailboxes(header(body, 'Cc'))];
      cc = shown.length || body ? shown : bare([...parent.toAddresses, ...parent.ccAddresses]);
    }
  }
  // Never to ourselves, and everyone once.
  const seen = new Set<string>([self]);
  const once = (list: Mailbox[]) =>
    list.filter((m) => {
      if (seen.has(m.address)) return false;
      seen.add(m.address);
      return true;
    });
  to = once(to);
  cc = once(cc);
  if (to.length === 0 && cc.length > 0) to = cc.splice(0, 1);
  return { to, cc };
}

function quoted(parent: MessageRead, body: StoredBody, author: string) {
  const when = parent.recordedAt.toUTCString();
  const intro = `On ${when}, ${author} wrote:`;
  const text = body.text ?? (body.html ? body.html.replace(/<[^>]*>/g, '') : '');
  return {
    text: `${intro}\n${text
      .replace(/\r?\n$/, '')
      .split(/\r?\n/)
      .map((l) => (l ? `> ${l}` : '>'))
      .join('\n')}`,
    html: `<p>${escapeHtml(intro)}</p><blockquote style="margin:0 0 0 .8ex;border-left:1px solid #ccc;padding-left:1ex">${body.html ?? escapeHtml(text).replace(/\r?\n/g, '<br>')}</blockquote>`,
  };
}

export async function replyToMessage(svc: Services, caller: SendCaller, input: Input): Promise<SendOrHeld> {
  return sendMessage(svc, caller, await replySendInput(svc, caller, input));
}

/**
 * The send a reply makes (recipients, subject, threading headers, quote, sending box, context), for
 * replyToMessage and for drafts that answer a message (drafts/drafts.ts), which send it through sendMessage.
 */
export async function replySendInput(
  svc: Services,
  caller: { account: Pick<SendCaller['account'], 'id' | 'primaryAddress'>; boxScope: SendCaller['boxScope'] },
  input: Input,
): Promise<z.infer<typeof SendInput>> {
  const accountId = caller.account.id;
  const parent = visibleMessage(await svc.db.message.findFirst({ where: { id: input.id, accountId }, omit: WITHOUT_RAW }), caller.boxScope, input.id);
  for (const name of Object.keys(input.headers ?? {})) {
    if (['in-reply-to', 'references'].includes(name.toLowerCase())) {
      throw new AppError('validation_error', `headers.${name}: a reply sets ${name} itself`, {
        fields: [{ path: `headers.${name}`, message: 'set by the reply' }],
      });
    }
  }
  const body = parent.bodyEnc ? openBody(svc.secretKey, parent.bodyEnc) : null;
  if (input.quote && !body) {
    throw new AppError('validation_error', 'quote: the body of this message was reclaimed; reply without quote', {
      fields: [{ path: 'quote', message: 'no body to quote' }],
    });
  }
  // The box that received (or sent) the original answers, unless from says otherwise.
  const box = parent.boxId ? await svc.db.box.findUnique({ where: { id: parent.boxId }, select: { address: true } }) : null;
  const from = input.from ?? box?.address ?? caller.account.primaryAddress;
  const self = (addressparser(from, { flatten: true })[0]?.address ?? from).toLowerCase();
  const { to, cc } = recipientsOf(parent, body, input.reply_all ?? false, self);
  if (to.length === 0) {
    throw new AppError('validation_error', 'this message names nobody to reply to (no Reply-To, From or recipients besides the sending box)', {
      fields: [{ path: 'id', message: 'no reply address' }],
    });
  }
  const extraCc = input.cc === undefined ? [] : Array.isArray(input.cc) ? input.cc : [input.cc];
  const references = replyReferences(parent);
  let text = input.text;
  let html = input.html;
  if (input.quote && body) {
    const q = quoted(parent, body, parent.direction === 'sent' ? (parent.fromAddress ?? from) : (header(body, 'From') ?? parent.fromAddress ?? 'the sender'));
    if (text !== undefined || html === undefined) text = `${text ?? ''}\n\n${q.text}`;
    if (html !== undefined) html = `${html}${q.html}`;
  }
  const send: z.infer<typeof SendInput> = {
    to: to.map(formatMailbox),
    ...(cc.length || extraCc.length ? { cc: [...cc.map(formatMailbox), ...extraCc] } : {}),
    ...(input.bcc !== undefined ? { bcc: input.bcc } : {}),
    from,
    subject: replySubject(parent.subject),
    ...(text !== undefined ? { text } : {}),
    ...(html !== undefined ? { html } : {}),
    ...(input.reply_to !== undefined ? { reply_to: input.reply_to } : {}),
    headers: { ...(input.headers ?? {}), 'In-Reply-To': parent.rfcMessageId, References: references.join(' ') },
    ...(input.attachments ? { attachments: input.attachments } : {}),
    ...(input.idempotency_key ? { idempotency_key: input.idempotency_key } : {}),
    ...(input.send_at !== undefined ? { send_at: input.send_at } : {}),
    ...(input.context !== undefined ? { context: input.context } : parent.context !== null ? { context: parent.context as Record<string, unknown> } : {}),
  };
  return send;
}
