/**
 * Send caps per box and per API key: messages per minute, hour and UTC day, and new recipients per UTC day.
 *
 * Counting lives in Redis, in fixed windows aligned on the service clock (the minute, the hour, the UTC day), one
 * key per cap and window that expires when its window ends. The rate caps count accepted messages (a message to
 * three people is one); the recipients cap keeps the day's distinct new recipients in a set (new: the sending
 * box never wrote to nor heard from the address, as owner review decides it; guard/pause.ts picks them; an
 * address counted once that day does not count again). One Lua script checks every cap that applies to a send (the box's and
 * the key's) and, only when none would be exceeded, takes from all of them: two sends at once cannot both take
 * the last place. A send refused later (402, say) gives its count back (refund).
 *
 * The first refusal by a cap in a window appends cap.reached and emails the owner (once per window: a SET NX
 * key that lives as long as the window).
 */
import { Prisma } from '@boxes/db';
import { CAP_NAMES, type CapName } from '@boxes/schemas';
import { appendEvent } from '../events/append';
import { queueNotice } from '../notices/notices';
import { createOwnerLink } from '../payments/owner';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';

export type SendCaps = Record<CapName, number | null>;

const WINDOW_MS: Record<CapName, number> = {
  per_minute: 60_000,
  per_hour: 3_600_000,
  per_day: 86_400_000,
  new_recipients_per_day: 86_400_000,
};

const NO_CAPS: SendCaps = { per_minute: null, per_hour: null, per_day: null, new_recipients_per_day: null };

/** The caps stored in a send_caps column (JSON), or null when none is set. */
export function capsOf(json: Prisma.JsonValue | null | undefined): SendCaps | null {
  if (!json || typeof json !== 'object' || Array.isArray(json)) return null;
  const out = { ...NO_CAPS };
  for (const name of CAP_NAMES) {
    const v = (json as Record<string, unknown>)[name];
    out[name] = typeof v === 'number' && Number.isInteger(v) && v > 0 ? v : null;
  }
  return CAP_NAMES.some((n) => out[n] !== null) ? out : null;
}

/** Caps as given on input (absent or null: no cap), as stored; null when none is set. */
export function capsInput(input: Partial<Record<CapName, number | null | undefined>> | undefined): SendCaps | null {
  if (!input) return null;
  return capsOf(input as Prisma.JsonValue);
}

export type CapOwner = { scope: 'box'; id: string } | { scope: 'key'; id: string };

interface Window {
  index: number;
  endsAt: number;
}

function windowOf(name: CapName, now: number): Window {
  const ms = WINDOW_MS[name];
  const index = Math.floor(now / ms);
  return { index, endsAt: (index + 1) * ms };
}

const counterKey = (svc: Pick<Services, 'config'>, owner: CapOwner, name: CapName, w: Window) =>
  `${svc.config.redisPrefix}:caps:${owner.scope}:${owner.id}:${name}:${w.index}`;

/**
 * KEYS[i]: the counter (kind n) or the recipient set (kind r) of check i. ARGV, per check: kind, limit, ttl_ms,
 * amount (messages, kind n), then the count of members and the members (kind r). Returns {i, used} for the first
 * check that would be exceeded (nothing taken), or {0, 0, then per set: i, count, members added}.
 */
const TAKE = `
local checks = {}
local p = 1
for i = 1, #KEYS do
  local c = { kind = ARGV[p], limit = tonumber(ARGV[p + 1]), ttl = tonumber(ARGV[p + 2]), amount = tonumber(ARGV[p + 3]), members = {} }
  local count = tonumber(ARGV[p + 4])
  for j = 1, count do c.members[j] = ARGV[p + 4 + j] end
  p = p + 5 + count
  checks[i] = c
end
for i, c in ipairs(checks) do
  if c.kind == 'n' then
    local used = tonumber(redis.call('GET', KEYS[i]) or '0')
    if used + c.amount > c.limit then return { i, used } end
  else
    local used = redis.call('SCARD', KEYS[i])
    local fresh = {}
    for _, m in ipairs(c.members) do
      if redis.call('SISMEMBER', KEYS[i], m) == 0 then fresh[#fresh + 1] = m end
    end
    if used + #fresh > c.limit then return { i, used } end
    c.fresh = fresh
  end
end
local out = { 0, 0 }
for i, c in ipairs(checks) do
  if c.kind == 'n' then
    redis.call('INCRBY', KEYS[i], c.amount)
    redis.call('PEXPIRE', KEYS[i], c.ttl)
  elseif #c.fresh > 0 then
    for _, m in ipairs(c.fresh) do redis.call('SADD', KEYS[i], m) end
    redis.call('PEXPIRE', KEYS[i], c.ttl)
    out[#out + 1] = i
    out[#out + 1] = #c.fresh
    for _, m in ipairs(c.fresh) do out[#out + 1] = m end
  end
end
return out
`;

/** One side of a send that caps apply to: a box or a key with its caps, and what the send counts there. */
export interface CapCharge {
  owner: CapOwner;
  caps: SendCaps | null;
  messages: number;
  recipients: string[];
  accountId: string;
  /** The box the event is about (box caps), so box-restricted keys see it. */
  boxId: string | null;
}

/** What a taken allowance can give back when the send it was taken for is refused after all. */
export interface CapTaken {
  refund(): Promise<void>;
}

interface Check {
  charge: CapCharge;
  name: CapName;
  limit: number;
  key: string;
  window: Window;
}

/**
 * Checks every cap of the charges and takes from all of them at once, or throws 429 cap_exceeded naming the first
 * cap that would be exceeded (with retry_after_seconds: the end of its window), taking nothing.
 */
export async function takeCaps(svc: Services, charges: CapCharge[]): Promise<CapTaken> {
  const now = svc.clock.now().getTime();
  const checks: Check[] = [];
  for (const charge of charges) {
    if (!charge.caps) continue;
    for (const name of CAP_NAMES) {
      const limit = charge.caps[name];
      if (limit === null) continue;
      const window = windowOf(name, now);
      checks.push({ charge, name, limit, window, key: counterKey(svc, charge.owner, name, window) });
    }
  }
  if (!checks.length) return { refund: async () => undefined };
  const args: (string | number)[] = [];
  for (const c of checks) {
    const ttl = c.window.endsAt - now + 1000;
    if (c.name === 'new_recipients_per_day') {
      const members = [...new Set(c.charge.recipients.map((r) => r.toLowerCase()))];
      args.push('r', c.limit, ttl, 0, members.length, ...members);
    } else {
      args.push('n', c.limit, ttl, c.charge.messages, 0);
    }
  }
  const out = (await svc.redis.eval(TAKE, checks.length, ...checks.map((c) => c.key), ...args)) as (number | string)[];
  const tripped = Number(out[0]);
  if (tripped > 0) {
    const c = checks[tripped - 1]!;
    await announce(svc, c, now).catch(() => undefined);
    throw capExceeded(c, Number(out[1]), now);
  }
  const added = new Map<string, string[]>();
  for (let p = 2; p < out.length; ) {
    const i = Number(out[p]);
    const n = Number(out[p + 1]);
    added.set(checks[i - 1]!.key, out.slice(p + 2, p + 2 + n).map(String));
    p += 2 + n;
  }
  return {
    refund: async () => {
      const m = svc.redis.multi();
      for (const c of checks) {
        if (c.name === 'new_recipients_per_day') {
          const fresh = added.get(c.key);
          if (fresh?.length) m.srem(c.key, ...fresh);
        } else if (c.charge.messages > 0) {
          m.decrby(c.key, c.charge.messages);
        }
      }
      await m.exec();
    },
  };
}

function capLabel(c: Pick<Check, 'charge' | 'name'>): string {
  return `${c.charge.owner.scope}.${c.name}`;
}

function capExceeded(c: Check, used: number, now: number): AppError {
  const retry = Math.max(1, Math.ceil((c.window.endsAt - now) / 1000));
  const what = c.name === 'new_recipients_per_day' ? 'distinct new recipients' : 'messages';
  const per = { per_minute: 'minute', per_hour: 'hour', per_day: 'UTC day', new_recipients_per_day: 'UTC day' }[c.name];
  const whose = c.charge.owner.scope === 'box' ? `box ${c.charge.owner.id}` : `API key ${c.charge.owner.id}`;
  return new AppError(
    'cap_exceeded',
    `The send cap ${capLabel(c)} of ${whose} is reached: at most ${c.limit} ${what} per ${per} (${used} used). Nothing was sent; try again in ${retry} s.`,
    {
      cap: capLabel(c),
      limit: c.limit,
      used,
      window_seconds: WINDOW_MS[c.name] / 1000,
      resets_at: new Date(c.window.endsAt).toISOString(),
      retry_after_seconds: retry,
      ...(c.charge.owner.scope === 'box' ? { box_id: c.charge.owner.id } : { key_id: c.charge.owner.id }),
    },
  );
}

/** The first refusal by a cap in its window: cap.reached and an email to the owner with a link to the owner pages. */
async function announce(svc: Services, c: Check, now: number): Promise<void> {
  const note = `${c.key}:noted`;
  const first = await svc.redis.set(note, '1', 'PX', c.window.endsAt - now + 1000, 'NX');
  if (first !== 'OK') return;
  const accountId = c.charge.accountId;
  const resetsAt = new Date(c.window.endsAt).toISOString();
  await svc.db.$transaction(async (tx) => {
    const account = await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { humanEmail: true, primaryAddress: true } });
    await appendEvent({
      db: tx,
      accountId,
      type: 'cap.reached',
      boxId: c.charge.boxId,
      data: {
        cap: capLabel(c),
        box_id: c.charge.owner.scope === 'box' ? c.charge.owner.id : null,
        key_id: c.charge.owner.scope === 'key' ? c.charge.owner.id : null,
        limit: c.limit,
        window_seconds: WINDOW_MS[c.name] / 1000,
        resets_at: resetsAt,
      },
    });
    const link = await createOwnerLink(svc, tx, { email: account.humanEmail, purpose: 'home' });
    await queueNotice(tx, {
      accountId,
      kind: 'cap.reached',
      to: account.humanEmail,
      subject: `Boxes: ${account.primaryAddress} reached its send cap ${capLabel(c)}`,
      text: [
        `Your agent ${account.primaryAddress} reached its send cap ${capLabel(c)} (${c.limit} per window). Sends over it are refused until ${resetsAt}.`,
        '',
        `To pause the account or one of its boxes (no send goes until you resume it), sign in: ${link}`,
        'The link works once, for 24 hours; the owner page has a Pause button per account and per box.',
      ].join('\n'),
    });
  });
}

/** The caps of a box or key with their use in the current windows (GET .../caps). */
export async function capUsage(svc: Services, owner: CapOwner, caps: SendCaps | null) {
  const now = svc.clock.now().getTime();
  const set = caps ?? NO_CAPS;
  const names = CAP_NAMES.filter((n) => set[n] !== null);
  const m = svc.redis.multi();
  for (const name of names) {
    const key = counterKey(svc, owner, name, windowOf(name, now));
    if (name === 'new_recipients_per_day') m.scard(key);
    else m.get(key);
  }
  const res = names.length ? ((await m.exec()) ?? []) : [];
  return {
    box_id: owner.scope === 'box' ? owner.id : null,
    key_id: owner.scope === 'key' ? owner.id : null,
    caps: set,
    usage: names.map((cap, i) => {
      const used = Number(res[i]?.[1] ?? 0) || 0;
      const limit = set[cap]!;
      return {
        cap,
        limit,
        used,
        remaining: Math.max(0, limit - used),
        window_seconds: WINDOW_MS[cap] / 1000,
        resets_at: new Date(windowOf(cap, now).endsAt).toISOString(),
      };
    }),
  };
}

/** GET /boxes/{id}/caps. */
export async function boxCaps(svc: Services, input: { accountId: string; scope: string[] | null; boxId: string }) {
  const box = await svc.db.box.findFirst({ where: { id: input.boxId, accountId: input.accountId }, select: { id: true, sendCaps: true } });
  if (!box || (input.scope && !input.scope.includes(box.id))) throw notFound('box', input.boxId);
  return capUsage(svc, { scope: 'box', id: box.id }, capsOf(box.sendCaps));
}

/** PUT /boxes/{id}/caps: replaces the box's caps (a cap left out is removed). */
export async function setBoxCaps(svc: Services, input: { accountId: string; scope: string[] | null; boxId: string; caps: SendCaps | null }) {
  const box = await svc.db.box.findFirst({ where: { id: input.boxId, accountId: input.accountId }, select: { id: true } });
  if (!box || (input.scope && !input.scope.includes(box.id))) throw notFound('box', input.boxId);
  await svc.db.box.update({ where: { id: box.id }, data: { sendCaps: input.caps ?? Prisma.DbNull } });
  return capUsage(svc, { scope: 'box', id: box.id }, input.caps);
}

/** GET /account/keys/{id}/caps. */
export async function keyCaps(svc: Services, input: { accountId: string; keyId: string }) {
  const key = await svc.db.apiKey.findFirst({ where: { id: input.keyId, accountId: input.accountId, revokedAt: null }, select: { id: true, sendCaps: true } });
  if (!key) throw notFound('API key', input.keyId);
  return capUsage(svc, { scope: 'key', id: key.id }, capsOf(key.sendCaps));
}
