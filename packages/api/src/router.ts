/** The one router. Served as tRPC (/trpc), REST (/api/v1) and, later, MCP tools. */
import { accountRouter } from './routers/account';
import { boxesRouter } from './routers/boxes';
import { eventsRouter } from './routers/events';
import { keysRouter } from './routers/keys';
import { appPasswordsRouter } from './routers/app-passwords';
import { mailClientsRouter } from './routers/mail-clients';
import { signupRouter } from './routers/signup';
import { messagesRouter } from './routers/messages';
import { bulkRouter } from './routers/bulk';
import { suppressionRouter } from './routers/suppression';
import { creditRouter } from './routers/credit';
import { iotRouter, webhookRouter } from './routers/webhook';
import { featuresRouter, supportRouter } from './routers/support';
import { listsRouter } from './routers/lists';
import { mcpRouter } from './routers/mcp';
import { domainsRouter } from './routers/domains';
import { dnsRouter } from './routers/dns';
import { auditRouter } from './routers/audit';
import { threadsRouter } from './routers/threads';
import { labelsRouter } from './routers/labels';
import { sendingIpRouter } from './routers/sending-ip';
import { forwardsRouter } from './routers/forwards';
import { webhookEndpointsRouter } from './routers/webhook-endpoints';
import { draftsRouter } from './routers/drafts';
import { guardRouter } from './routers/guard';
import { reviewsRouter } from './routers/reviews';
import { router } from './trpc';
import { registerProcedureInputs } from './input-guard';
import { pinCoercion } from './no-coercion';

export const appRouter = router({
  signup: signupRouter,
  account: accountRouter,
  domains: domainsRouter,
  dns: dnsRouter,
  keys: keysRouter,
  appPasswords: appPasswordsRouter,
  mailClients: mailClientsRouter,
  boxes: boxesRouter,
  events: eventsRouter,
  messages: messagesRouter,
  drafts: draftsRouter,
  bulk: bulkRouter,
  suppression: suppressionRouter,
  credit: creditRouter,
  webhook: webhookRouter,
  webhookEndpoints: webhookEndpointsRouter,
  iot: iotRouter,
  mcp: mcpRouter,
  support: supportRouter,
  features: featuresRouter,
  audit: auditRouter,
  threads: threadsRouter,
  labels: labelsRouter,
  sendingIp: sendingIpRouter,
  forwards: forwardsRouter,
  lists: listsRouter,
  guard: guardRouter,
  reviews: reviewsRouter,
});

const procedures = (appRouter as unknown as { _def: { procedures: Parameters<typeof registerProcedureInputs>[0] } })._def.procedures;
registerProcedureInputs(procedures);
pinCoercion(Object.values(procedures).flatMap((p) => p._def.inputs));

export type AppRouter = typeof appRouter;
