/**
 * Database access: the Prisma 7 client factory (driver adapter over pg), the migration runner used at start
 * and in tests, the helpers that create a database and explain a missing server in one line, and typed SQL
 * (sql.ts: Kysely statements checked against the schema, run through the client).
 */
export { closeDb, createDb, poolOf, quietWhileCheckedOut, type Db, type Tx, type DbClient } from './client';
export { migrate, migrationsDir } from './migrate';
export { copyOutBinary, type CopyRow } from './copy-out';
export { ensureDatabase, describeConnectionError, ServiceUnavailableError } from './bootstrap';
export { Prisma } from './generated/client';
export {
  k,
  sql,
  rows,
  poolRows,
  poolTransaction,
  prepared,
  parameterRows,
  valueRows,
  PARAMETER_ROW_SIZES,
  LARGEST_ROWS,
  type ParameterRowStatement,
  beginTransaction,
  commitWithNext,
  prismaTx,
  PrismaTransactionNeeded,
  type SqlClient,
  exec,
  compile,
  col,
  table,
  tbl,
  type DB,
  type Statement,
  type Table,
  type Column,
  type TableRefs,
} from './sql';
export type { CompiledQuery, Insertable, RawBuilder } from 'kysely';
export type {
  Account,
  SignupIntent,
  Domain,
  ApiKey,
  Box,
  Event,
  Message,
  MessageAttachment,
  Delivery,
  Suppression,
  LedgerEntry,
  WebhookDelivery,
  WebhookEndpoint,
  IotCredential,
  SupportQuestion,
  SupportMessage,
  FeatureRequest,
  Payment,
  Wallet,
  Notice,
  AuditSigningKey,
  AuditCheckpoint,
  AccountCloseRequest,
  AccountExport,
  AppPassword,
  MailFolder,
  MailFolderEntry,
  MessageFlags,
  BulkJob,
  BulkJobItem,
} from './generated/client';
export type { SendingIp, BoxForward, ForwardRun, Draft } from './generated/client';
export type { TrustListEntry } from './generated/client';
export type { SendReview } from './generated/client';
