/** The one router. Served as tRPC (/trpc), REST (/api/v1) and, later, MCP tools. */
import { accountRouter } from './routers/account';
import { boxesRouter } from './routers/boxes';
import { eventsRouter } from './routers/events';
import { keysRouter } from './routers/keys';
import { appPasswordsRouter } from './routers/app-passwords';
import { signupRouter } from './routers/signup';
import { messagesRouter } from './routers/messages';
import { suppressionRouter } from './routers/suppression';
import { creditRouter } from './routers/credit';
import { iotRouter, webhookRouter } from './routers/webhook';
import { featuresRouter, supportRouter } from './routers/support';
import { mcpRouter } from './routers/mcp';
import { domainsRouter } from './routers/domains';
import { router } from './trpc';

export const appRouter = router({
  signup: signupRouter,
  account: accountRouter,
  domains: domainsRouter,
  keys: keysRouter,
  appPasswords: appPasswordsRouter,
  boxes: boxesRouter,
  events: eventsRouter,
  messages: messagesRouter,
  suppression: suppressionRouter,
  credit: creditRouter,
  webhook: webhookRouter,
  iot: iotRouter,
  mcp: mcpRouter,
  support: supportRouter,
  features: featuresRouter,
});

export type AppRouter = typeof appRouter;
