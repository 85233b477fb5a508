/**
 * platform.updated: when a start finds an API version other than the last one recorded, every account's stream
 * gets one event with the new version and where the OpenAPI document and the skill file are. The compare-and-set on the
 * recorded version makes exactly one of several instances starting at once announce it.
 */
import type { Services } from '../shared/context';
import { appendEvent } from '../events/append';

const KEY = 'api_version';

export async function announcePlatformVersion(svc: Services, version: string): Promise<{ announced: boolean; accounts: number }> {
  const prior = await svc.db.platformSetting.findUnique({ where: { key: KEY } });
  if (prior?.value === version) return { announced: false, accounts: 0 };
  const won = prior
    ? (await svc.db.platformSetting.updateMany({ where: { key: KEY, value: prior.value }, data: { value: version } })).count === 1
    : (await svc.db.platformSetting.createMany({ data: [{ key: KEY, value: version }], skipDuplicates: true })).count === 1;
  if (!won) return { announced: false, accounts: 0 };
  const data = {
    version,
    previous_version: prior?.value ?? null,
    openapi_url: `${svc.config.siteUrl}/openapi.json`,
    openapi_yaml_url: `${svc.config.siteUrl}/openapi.yaml`,
    skill_url: `${svc.config.siteUrl}/skill.md`,
    docs_url: `${svc.config.siteUrl}/docs`,
    discovery_url: `${svc.config.siteUrl}/.well-known/agentic.json`,
  };
  let accounts = 0;
  let after = '';
  for (;;) {
    const batch = await svc.db.account.findMany({ where: { id: { gt: after } }, orderBy: { id: 'asc' }, take: 500, select: { id: true } });
    if (!batch.length) break;
    for (const a of batch) {
      await appendEvent({ db: svc.db, accountId: a.id, type: 'platform.updated', data });
      accounts += 1;
    }
    after = batch[batch.length - 1]!.id;
  }
  return { announced: true, accounts };
}
