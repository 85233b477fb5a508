/**
 * MCP access per account. MCP is open to every key by default (enrolled when the account is created);
 * disable stamps disabled_at and keeps enrolled_at, enable clears disabled_at. Each change is an event.
 */
import type { Db } from '@boxes/db';
import { appendEvent } from '../events/append';

function present(a: { mcpEnrolledAt: Date; mcpDisabledAt: Date | null }) {
  return { enabled: !a.mcpDisabledAt, enrolled_at: a.mcpEnrolledAt.toISOString(), disabled_at: a.mcpDisabledAt?.toISOString() ?? null };
}

export async function mcpStatus(db: Db, accountId: string) {
  return present(await db.account.findUniqueOrThrow({ where: { id: accountId }, select: { mcpEnrolledAt: true, mcpDisabledAt: true } }));
}

export async function setMcpEnabled(db: Db, accountId: string, enabled: boolean, actorKeyId: string) {
  return db.$transaction(async (tx) => {
    const a = await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { mcpEnrolledAt: true, mcpDisabledAt: true } });
    if (enabled === !a.mcpDisabledAt) return present(a); // already so: no event
    const updated = await tx.account.update({
      where: { id: accountId },
      data: { mcpDisabledAt: enabled ? null : new Date() },
      select: { mcpEnrolledAt: true, mcpDisabledAt: true },
    });
    await appendEvent({
      db: tx,
      accountId,
      type: enabled ? 'account.mcp.enabled' : 'account.mcp.disabled',
      data: { ...present(updated), by_key_id: actorKeyId },
    });
    return present(updated);
  });
}
