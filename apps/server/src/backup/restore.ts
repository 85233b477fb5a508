/**
 * `boxes restore <file>`: an archive of `boxes backup` into the database DATABASE_URL names (a new, empty one:
 * a database with any table is refused unless --force, which drops and creates it again), then the migrations
 * this Boxes has beyond the backup's, then the keys where this environment's instance reads them: the secret key
 * into <data dir>/secret-key (BOXES_DATA_DIR), the key and certificate files where the configuration names them
 * (or into <data dir>/restored/ with the setting to add).
 *
 * Everything that can refuse is checked before the database is touched: the archive whole (checksums, and with
 * a passphrase the authentication of every member), the schema not newer than this Boxes' migrations, the keys
 * not in conflict with keys already in place, the target empty. pg_restore runs in one transaction
 * (--single-transaction --exit-on-error): a failed restore leaves the target as it was.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import type { Config } from '@boxes/config';
import { describeConnectionError, ensureDatabase, migrate, migrationsDir } from '@boxes/db';
import { dataDir, secretKeyFile } from '../secret-key';
import { BackupError, DATABASE_MEMBER, deriveKey, discard, KEYS_MEMBER, type KeysFile, type Manifest, openStream, readArchive } from './archive';
import { KEY_FILE_SETTINGS, type KeyFileSetting, keyFilePath, sha256Hex } from './backup';
import { findPgTool, runPgTool } from './pg-tools';
import { checkSealedKeys } from './sealed';

export interface RestoreOptions {
  file: string;
  passphrase: string | null;
  /** Drop and create the target database again when it is not empty; put keys aside that differ from the backup's. */
  force: boolean;
  /** Only read and check the archive (checksums, passphrase, schema level); change nothing. */
  check: boolean;
  pgBin?: string | undefined;
  log: (line: string) => void;
}

export interface RestoreResult {
  manifest: Manifest;
  /** Migrations applied after the restore (the backup was older than this Boxes). */
  applied: string[];
  /** Files written (the secret key, key and certificate files). */
  written: string[];
  /** What the operator still has to do. */
  todo: string[];
}

function localMigrations(): string[] {
  return fs
    .readdirSync(migrationsDir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && fs.existsSync(path.join(migrationsDir, d.name, 'migration.sql')))
    .map((d) => d.name)
    .sort();
}

/** A key file to put in place: where, and whether something else is there already. */
interface Placement {
  what: string;
  target: string;
  content: Buffer;
  mode: number;
  /** A file with other content is there: put aside with --force, else refuse. */
  conflict: boolean;
  /** The same content is there: nothing to write. */
  present: boolean;
  /** A setting the operator must add for the instance to read it (key files the configuration does not name). */
  setting?: string;
}

function placement(what: string, target: string, content: Buffer, mode: number, setting?: string): Placement {
  const existing = fs.existsSync(target) ? fs.readFileSync(target) : null;
  const present = !!existing && (existing.equals(content) || (what === 'secret key' && existing.toString('utf8').trim() === content.toString('utf8').trim()));
  return { what, target, content, mode, present, conflict: !!existing && !present, ...(setting ? { setting } : {}) };
}

function planKeys(config: Config, keys: KeysFile): { placements: Placement[]; todo: string[] } {
  const todo: string[] = [];
  const placements: Placement[] = [];
  if (config.secretKey) {
    let same = false;
    try {
      same = Buffer.from(keys.secret_key, 'hex').equals(
        /^[0-9a-f]{64}$/i.test(config.secretKey) ? Buffer.from(config.secretKey, 'hex') : Buffer.from(config.secretKey, 'base64'),
      );
    } catch {
      same = false;
    }
    if (!same) {
      throw new BackupError(
        `BOXES_SECRET_KEY in this environment is not the backup's key, and the restored data opens only with the backup's. ` +
          `Unset it (restore then writes the backup's key to ${secretKeyFile(config)}), or set it to the backup's key`,
      );
    }
  } else {
    placements.push(placement('secret key', secretKeyFile(config), Buffer.from(keys.secret_key), 0o600));
    if (config.nodeEnv === 'production') {
      todo.push(`NODE_ENV=production reads the key from BOXES_SECRET_KEY only: set it to the content of ${secretKeyFile(config)}`);
    }
  }
  for (const f of keys.files) {
    const setting = f.setting as KeyFileSetting;
    if (!(KEY_FILE_SETTINGS as readonly string[]).includes(setting)) continue;
    const named = keyFilePath(config, setting);
    const content = Buffer.from(f.content_base64, 'base64');
    if (named) placements.push(placement(setting, path.resolve(named), content, f.mode & 0o777 || 0o600));
    else {
      const target = path.join(dataDir(config), 'restored', `${setting.toLowerCase().replaceAll('_', '-')}-${path.basename(f.path)}`);
      placements.push(placement(setting, target, content, f.mode & 0o777 || 0o600, `${setting}=${target}`));
    }
  }
  for (const p of placements) if (p.setting) todo.push(`set ${p.setting} (the source instance had ${p.what} set)`);
  return { placements, todo };
}

async function relationsIn(databaseUrl: string): Promise<number> {
  const c = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5000 });
  try {
    await c.connect();
  } catch (err) {
    throw new BackupError(describeConnectionError(databaseUrl, err));
  }
  try {
    const r = await c.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'`,
    );
    return Number(r.rows[0]!.n);
  } finally {
    await c.end();
  }
}

/** The major version of the server DATABASE_URL names, asked through its maintenance database (the target may not exist yet). */
async function serverMajorOf(databaseUrl: string): Promise<number> {
  const admin = new URL(databaseUrl);
  admin.pathname = '/postgres';
  const c = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 5000 });
  try {
    await c.connect();
  } catch (err) {
    throw new BackupError(describeConnectionError(databaseUrl, err));
  }
  try {
    return Math.floor(Number((await c.query<{ n: string }>(`SELECT current_setting('server_version_num') AS n`)).rows[0]!.n) / 10_000);
  } finally {
    await c.end();
  }
}

/** Drops the target database and creates it again, empty (--force on a database that is not). */
async function recreateDatabase(databaseUrl: string): Promise<void> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.slice(1));
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const c = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 5000 });
  await c.connect();
  try {
    const ident = `"${name.replaceAll('"', '""')}"`;
    await c.query(`DROP DATABASE IF EXISTS ${ident} WITH (FORCE)`);
    await c.query(`CREATE DATABASE ${ident}`);
  } finally {
    await c.end();
  }
}

function writeKeyFile(p: Placement, log: (line: string) => void): void {
  fs.mkdirSync(path.dirname(p.target), { recursive: true, mode: 0o700 });
  if (p.conflict) {
    const aside = `${p.target}.replaced-${new Date().toISOString().replace(/[:.]/g, '-')}`;
    fs.renameSync(p.target, aside);
    log(`${p.what}: the file that was at ${p.target} is now ${aside}`);
  }
  fs.writeFileSync(p.target, p.content, { mode: p.mode, flag: 'wx' });
}

export async function restoreBackup(config: Config, opts: RestoreOptions): Promise<RestoreResult> {
  const file = path.resolve(opts.file);
  if (!fs.existsSync(file)) throw new BackupError(`${file} does not exist`);
  const local = localMigrations();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-restore-'));
  const dumpFile = path.join(dir, DATABASE_MEMBER);
  let archiveKey: Buffer | null = null;
  let keys: KeysFile | null = null;
  let backupId = '';
  try {
    const manifest = await readArchive(
      file,
      async (m) => {
        backupId = m.backup_id;
        const newer = m.schema.migrations.filter((n) => !local.includes(n));
        if (newer.length) {
          throw new BackupError(
            `the backup's schema is newer than this Boxes (${newer.length} migration(s) it does not have, e.g. ${newer[0]}): restore with the Boxes that made it, or a newer one`,
          );
        }
        if (m.encryption) {
          if (!opts.passphrase) throw new BackupError('the archive is encrypted: give its passphrase with --passphrase-file');
          archiveKey = await deriveKey(opts.passphrase, m.encryption);
        }
        opts.log(
          `archive ${m.backup_id} of ${m.created_at}: database ${m.database.name} (PostgreSQL ${m.database.server_version}), ${m.schema.migrations.length} migrations${m.encryption ? ', encrypted' : ''}`,
        );
      },
      async (member, stream) => {
        const base = member.name.replace(/\.enc$/, '');
        const plain = member.encrypted ? stream.pipe(openStream(archiveKey!, backupId, member.name, member.bytes)) : stream;
        if (base === KEYS_MEMBER) {
          const chunks: Buffer[] = [];
          for await (const c of plain) chunks.push(c as Buffer);
          keys = JSON.parse(Buffer.concat(chunks).toString('utf8')) as KeysFile;
        } else if (base === DATABASE_MEMBER) {
          await pipeline(plain, opts.check ? discard() : fs.createWriteStream(dumpFile, { mode: 0o600, flags: 'wx' }));
        } else {
          await pipeline(stream, discard());
        }
      },
    );
    if (!keys) throw new BackupError(`the archive has no ${KEYS_MEMBER}`);
    const k = keys as KeysFile;
    if (sha256Hex(Buffer.from(k.secret_key, 'hex')) !== manifest.keys.secret_key_sha256) {
      throw new BackupError('the secret key in the archive is not the one its manifest names');
    }
    const { placements, todo } = planKeys(config, k);
    const conflicts = placements.filter((p) => p.conflict);
    if (opts.check) {
      opts.log(`the archive is whole: checksums match${manifest.encryption ? ', every member opens with the passphrase' : ''}; its schema fits this Boxes`);
      for (const p of conflicts) opts.log(`note: ${p.target} holds another ${p.what} (restore would need --force)`);
      return { manifest, applied: [], written: [], todo };
    }
    if (conflicts.length && !opts.force) {
      throw new BackupError(
        `${conflicts.map((p) => `${p.target} holds another ${p.what}`).join('; ')}: restore into a new data dir (BOXES_DATA_DIR), or --force to put those files aside`,
      );
    }

    // The server and the tool before anything is created.
    const targetMajor = await serverMajorOf(config.directDatabaseUrl);
    const sourceMajor = Number(/^(\d+)/.exec(manifest.database.server_version)?.[1] ?? 0);
    if (targetMajor < sourceMajor && !opts.force) {
      throw new BackupError(
        `the target server is PostgreSQL ${targetMajor}, the backup is of ${sourceMajor}: PostgreSQL restores into the same or a newer major version (--force tries anyway)`,
      );
    }
    const dumpMajor = Number(/\(PostgreSQL\)\s+(\d+)/.exec(manifest.database.pg_dump_version)?.[1] ?? 0);
    const pgRestore = findPgTool('pg_restore', targetMajor, { binDir: opts.pgBin, atLeast: dumpMajor });

    await ensureDatabase(config.directDatabaseUrl);
    const existing = await relationsIn(config.directDatabaseUrl);
    const target = decodeURIComponent(new URL(config.directDatabaseUrl).pathname.slice(1));
    if (existing) {
      if (!opts.force) {
        throw new BackupError(
          `database ${target} is not empty (${existing} relations): restore into a new, empty database, or --force to drop it and create it again`,
        );
      }
      opts.log(`--force: dropping database ${target} (${existing} relations) and creating it again`);
      await recreateDatabase(config.directDatabaseUrl);
    }
    opts.log(`restoring into ${target} with ${pgRestore.path} (${pgRestore.version})`);
    await runPgTool(
      pgRestore,
      ['--no-owner', '--no-privileges', '--exit-on-error', '--single-transaction', '--no-password', `--dbname=${target}`, dumpFile],
      config.directDatabaseUrl,
    ).done;
    fs.rmSync(dumpFile, { force: true });

    const { applied } = await migrate(config.directDatabaseUrl);
    if (applied.length) opts.log(`the backup was older than this Boxes: applied ${applied.length} migration(s) (${applied.join(', ')})`);

    const c = new pg.Client({ connectionString: config.directDatabaseUrl, connectionTimeoutMillis: 5000 });
    await c.connect();
    try {
      const opened = await checkSealedKeys(c, Buffer.from(k.secret_key, 'hex'));
      opts.log(`the backup's secret key opens the restored ${opened.join(', ') || '(nothing sealed)'}`);
    } finally {
      await c.end();
    }

    const written: string[] = [];
    for (const p of placements) {
      if (p.present) {
        opts.log(`${p.what}: ${p.target} already holds it`);
        continue;
      }
      writeKeyFile(p, opts.log);
      written.push(p.target);
      opts.log(`${p.what} written to ${p.target}`);
    }
    for (const g of manifest.database.grants) todo.push(`grant again what the source database granted to other roles: ${g}`);
    return { manifest, applied, written, todo };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
