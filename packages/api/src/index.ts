/** The API package: the one router, its context and error mapping, and the OpenAPI document. */
export { appRouter, type AppRouter } from './router';
export { buildOpenApiDocument, API_VERSION } from './openapi';
export {
  toAppError,
  serviceUnavailable,
  UNAVAILABLE_RETRY_SECONDS,
  describeZodError,
  gettingStarted,
  authenticateCall,
  createCallerFactory,
  type Context,
  type Transport,
  type ErrorData,
} from './trpc';
export { procedureTools, type ProcedureTool } from './tools';
export { carriesMailContent, senderVerified, untrustedMailText, UNTRUSTED_NOTE, UNTRUSTED_TAG } from './untrusted';
export { routeFamilies, type RouteFamily, type RouteOperation } from './families';
export { rateLimitFields, setRateLimitFields, RATE_LIMIT_POLICY } from './rate-limit';
export { guardInput, stringProblem, type GuardIssue } from './input-guard';
