/**
 * `boxes backup <file>`: the database and every key the instance holds outside it, in one archive (archive.ts).
 *
 * Consistency: one connection opens a REPEATABLE READ transaction and exports its snapshot; the manifest's facts
 * (schema level, grants, the check that the secret key opens the sealed keys) are read in it, and pg_dump dumps
 * that same snapshot (--snapshot), so everything in the archive is the database at one instant, taken while the
 * instance runs. The keys outside the database do not change while it runs (the instance never rewrites them).
 *
 * The archive is assembled in a directory beside it (mode 0700) and appears under its name only when complete
 * (a hard link, which never replaces an existing file).
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { API_VERSION } from '@boxes/api';
import type { Config } from '@boxes/config';
import { describeConnectionError } from '@boxes/db';
import { existingSecretKey } from '../secret-key';
import {
  BackupError,
  DATABASE_MEMBER,
  Digest,
  deriveKey,
  FORMAT,
  FORMAT_VERSION,
  KEYS_MEMBER,
  type KeysFile,
  type Manifest,
  type Member,
  newEncryption,
  sealStream,
  writeArchive,
} from './archive';
import { findPgTool, runPgTool } from './pg-tools';
import { checkSealedKeys } from './sealed';

export interface BackupOptions {
  out: string;
  /** Seal the keys and the dump with this passphrase; null: the archive holds them in clear (mode 0600). */
  passphrase: string | null;
  /** Directory of the pg_dump to use. */
  pgBin?: string | undefined;
  log: (line: string) => void;
}

/** The settings that name key and certificate files; their contents go into keys.json. */
export const KEY_FILE_SETTINGS = ['SMTP_TLS_CERT_FILE', 'SMTP_TLS_KEY_FILE', 'WEBHOOK_CA_FILE'] as const;
export type KeyFileSetting = (typeof KEY_FILE_SETTINGS)[number];

export function keyFilePath(config: Config, setting: KeyFileSetting): string | undefined {
  return setting === 'SMTP_TLS_CERT_FILE' ? config.smtp.tlsCertFile : setting === 'SMTP_TLS_KEY_FILE' ? config.smtp.tlsKeyFile : config.webhook.caFile;
}

export const sha256Hex = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** What the snapshot transaction reads before pg_dump runs. */
interface Facts {
  snapshot: string;
  database: string;
  serverVersion: string;
  serverMajor: number;
  sizeBytes: number;
  migrations: string[];
  grants: string[];
  sealedChecked: string[];
}

async function readFacts(client: pg.Client, secretKey: Buffer): Promise<Facts> {
  // The transaction sits idle while pg_dump works on its snapshot: a server-wide idle timeout must not end it.
  await client.query('SET idle_in_transaction_session_timeout = 0');
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  const snap = await client.query<{ s: string; db: string; v: string; n: string; size: string }>(
    `SELECT pg_export_snapshot() AS s, current_database() AS db, current_setting('server_version') AS v,
            current_setting('server_version_num') AS n, pg_database_size(current_database())::text AS size`,
  );
  const f = snap.rows[0]!;
  const has = await client.query(`SELECT to_regclass('public._prisma_migrations') IS NOT NULL AS ok`);
  if (!has.rows[0].ok) throw new BackupError(`database ${f.db} has no Boxes schema (no _prisma_migrations): nothing to back up`);
  const migrations = await client.query<{ migration_name: string }>(
    `SELECT migration_name FROM "_prisma_migrations" WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL ORDER BY migration_name`,
  );
  const grants = await client.query<{ sql: string }>(
    `SELECT format('GRANT %s ON %I.%I TO %s;', string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type), n.nspname, c.relname,
                   CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END) AS sql
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a
      WHERE n.nspname = 'public' AND a.grantee <> c.relowner
      GROUP BY n.nspname, c.relname, a.grantee ORDER BY 1`,
  );
  let sealedChecked: string[];
  try {
    sealedChecked = await checkSealedKeys(client, secretKey);
  } catch (err) {
    throw new BackupError(`${(err as Error).message}. Run the backup with the instance's own BOXES_SECRET_KEY (or BOXES_DATA_DIR)`);
  }
  return {
    snapshot: f.s,
    database: f.db,
    serverVersion: f.v,
    serverMajor: Math.floor(Number(f.n) / 10_000),
    sizeBytes: Number(f.size),
    migrations: migrations.rows.map((r) => r.migration_name),
    grants: grants.rows.map((r) => r.sql),
    sealedChecked,
  };
}

/** Writes `file` from a stream, sealed when `key` is given; answers the member as the manifest lists it. */
async function writeMember(
  dir: string,
  name: string,
  source: NodeJS.ReadableStream,
  seal: { key: Buffer; backupId: string } | null,
): Promise<{ member: Member; file: string }> {
  const stored = seal ? `${name}.enc` : name;
  const file = path.join(dir, stored);
  const digest = new Digest();
  const out = fs.createWriteStream(file, { mode: 0o600, flags: 'wx' });
  if (seal) await pipeline(source, sealStream(seal.key, seal.backupId, stored), digest, out);
  else await pipeline(source, digest, out);
  return { member: { name: stored, bytes: digest.bytes, sha256: digest.hex(), encrypted: !!seal }, file };
}

export async function createBackup(config: Config, opts: BackupOptions): Promise<{ file: string; manifest: Manifest }> {
  const out = path.resolve(opts.out);
  if (fs.existsSync(out)) throw new BackupError(`${out} exists: name a new file (a backup never replaces one)`);
  const secret = existingSecretKey(config);
  if (!secret) {
    throw new BackupError(
      config.nodeEnv === 'production'
        ? 'BOXES_SECRET_KEY is not set: run the backup in the instance environment'
        : 'this environment has no secret key (BOXES_SECRET_KEY unset and no <data dir>/secret-key): run the backup in the instance environment',
    );
  }
  const files: KeysFile['files'] = [];
  for (const setting of KEY_FILE_SETTINGS) {
    const p = keyFilePath(config, setting);
    if (!p) continue;
    const st = fs.statSync(p);
    files.push({ setting, path: path.resolve(p), mode: st.mode & 0o777, content_base64: fs.readFileSync(p).toString('base64') });
  }
  const backupId = `bak_${randomBytes(10).toString('hex')}`;
  const encryption = opts.passphrase ? newEncryption() : null;
  const archiveKey = encryption ? await deriveKey(opts.passphrase!, encryption) : null;
  const seal = archiveKey ? { key: archiveKey, backupId } : null;

  const dir = fs.mkdtempSync(path.join(path.dirname(out), `.${path.basename(out)}.tmp-`));
  const client = new pg.Client({ connectionString: config.directDatabaseUrl, connectionTimeoutMillis: 5000 });
  try {
    try {
      await client.connect();
    } catch (err) {
      throw new BackupError(describeConnectionError(config.directDatabaseUrl, err));
    }
    const facts = await readFacts(client, secret.key);
    opts.log(`database ${facts.database} (PostgreSQL ${facts.serverVersion}, ${facts.migrations.length} migrations, ${facts.sizeBytes} bytes)`);
    opts.log(`secret key (${secret.source === 'file' ? secret.file : 'BOXES_SECRET_KEY'}) opens ${facts.sealedChecked.join(', ') || 'nothing sealed yet'}`);

    const keys: KeysFile = { secret_key: secret.key.toString('hex'), secret_key_source: secret.source, files };
    const keysMember = await writeMember(dir, KEYS_MEMBER, Readable.from([Buffer.from(JSON.stringify(keys))]), seal);

    const pgDump = findPgTool('pg_dump', facts.serverMajor, { binDir: opts.pgBin });
    opts.log(`dumping with ${pgDump.path} (${pgDump.version})`);
    const dump = runPgTool(
      pgDump,
      ['--format=custom', `--snapshot=${facts.snapshot}`, '--no-password', `--dbname=${facts.database}`],
      config.directDatabaseUrl,
      {
        pipeStdout: true,
      },
    );
    let dbMember: Awaited<ReturnType<typeof writeMember>>;
    try {
      [dbMember] = await Promise.all([writeMember(dir, DATABASE_MEMBER, dump.stdout!, seal), dump.done]);
    } catch (err) {
      // Writing the member failed (or pg_dump did): pg_dump must not go on dumping into a pipe nobody reads.
      dump.stop();
      dump.done.catch(() => undefined);
      throw err;
    }
    // The snapshot had to live until pg_dump had taken it; now the transaction can end.
    await client.query('COMMIT');

    const manifest: Manifest = {
      format: FORMAT,
      format_version: FORMAT_VERSION,
      backup_id: backupId,
      created_at: new Date().toISOString(),
      boxes_api_version: API_VERSION,
      schema: { migrations: facts.migrations, latest: facts.migrations.at(-1) ?? null },
      database: {
        name: facts.database,
        server_version: facts.serverVersion,
        pg_dump_version: pgDump.version,
        snapshot: 'pg_dump --snapshot of a REPEATABLE READ transaction that also read this manifest',
        size_bytes: facts.sizeBytes,
        grants: facts.grants,
      },
      instance: { base_domain: config.baseDomain, mail_host: config.mailHost, site_url: config.siteUrl },
      keys: { secret_key_source: secret.source, secret_key_sha256: sha256Hex(secret.key), files: files.map((f) => f.setting) },
      encryption,
      members: [keysMember.member, dbMember.member],
    };
    const staged = path.join(dir, 'archive.tar');
    await writeArchive(staged, manifest, { [keysMember.member.name]: keysMember.file, [dbMember.member.name]: dbMember.file });
    const fd = fs.openSync(staged, 'r');
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.linkSync(staged, out);
    return { file: out, manifest };
  } finally {
    await client.end().catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
