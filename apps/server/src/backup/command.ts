/** The `boxes backup` and `boxes restore` commands of the operator CLI (cli.ts): arguments, messages, exit codes. */
import fs from 'node:fs';
import { ConfigError, loadConfig } from '@boxes/config';
import { ServiceUnavailableError } from '@boxes/db';
import { BackupError } from './archive';
import { createBackup } from './backup';
import { restoreBackup } from './restore';

export const BACKUP_USAGE = `  pnpm boxes backup <file> [--passphrase-file <file>|-] [--pg-bin <dir>]
  pnpm boxes restore <file> [--passphrase-file <file>|-] [--check] [--force] [--pg-bin <dir>]`;

const log = (line: string) => console.log(`boxes: ${line}`);

interface Args {
  file: string | undefined;
  passphraseFile: string | undefined;
  pgBin: string | undefined;
  force: boolean;
  check: boolean;
}

function parse(argv: string[], allowed: Set<string>): Args {
  const a: Args = { file: undefined, passphraseFile: undefined, pgBin: undefined, force: false, check: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg.startsWith('--') && !allowed.has(arg)) throw new ConfigError(`unknown option ${arg}`);
    if (arg === '--passphrase-file' || arg === '--pg-bin') {
      const v = argv[++i];
      if (!v) throw new ConfigError(`${arg} needs a value`);
      if (arg === '--passphrase-file') a.passphraseFile = v;
      else a.pgBin = v;
    } else if (arg === '--force') a.force = true;
    else if (arg === '--check') a.check = true;
    else if (a.file) throw new ConfigError(`one archive file, not ${a.file} and ${arg}`);
    else a.file = arg;
  }
  return a;
}

/** The passphrase: the file's first line ("-": standard input). */
function readPassphrase(file: string | undefined): string | null {
  if (!file) return null;
  const text = fs.readFileSync(file === '-' ? 0 : file, 'utf8');
  const pass = text.split(/\r?\n/)[0] ?? '';
  if (pass.length < 12) throw new ConfigError('the passphrase must be at least 12 characters (openssl rand -base64 32 makes a good one)');
  return pass;
}

export async function backupCommand(command: 'backup' | 'restore', argv: string[], usage: string): Promise<number> {
  let args: Args;
  try {
    args = parse(argv, new Set(command === 'backup' ? ['--passphrase-file', '--pg-bin'] : ['--passphrase-file', '--pg-bin', '--force', '--check']));
  } catch (err) {
    console.error(`boxes: ${(err as Error).message}\n${usage}`);
    return 2;
  }
  if (!args.file) {
    console.error(usage);
    return 2;
  }
  try {
    const config = loadConfig();
    const passphrase = readPassphrase(args.passphraseFile);
    if (command === 'backup') {
      const { file, manifest } = await createBackup(config, { out: args.file, passphrase, pgBin: args.pgBin, log });
      const bytes = fs.statSync(file).size;
      log(`backup ${manifest.backup_id} written to ${file} (${bytes} bytes, mode 0600, schema ${manifest.schema.latest})`);
      if (!manifest.encryption) {
        console.error(
          `boxes: WARNING: ${file} holds the instance's secret key in clear, and with it every sealed body, DKIM key and\n` +
            '  audit signing key: anyone who can read it can read all mail and sign as this instance. Keep it readable by\n' +
            '  you alone, store it encrypted, or make it with --passphrase-file.',
        );
      }
      return 0;
    }
    const r = await restoreBackup(config, { file: args.file, passphrase, force: args.force, check: args.check, pgBin: args.pgBin, log });
    if (!args.check) log(`restored backup ${r.manifest.backup_id} (${r.manifest.created_at}); start the instance as usual`);
    for (const t of r.todo) log(`to do: ${t}`);
    return 0;
  } catch (err) {
    if (err instanceof BackupError || err instanceof ConfigError || err instanceof ServiceUnavailableError) {
      console.error(`boxes: ${command} failed: ${err.message}`);
      return 1;
    }
    throw err;
  }
}
