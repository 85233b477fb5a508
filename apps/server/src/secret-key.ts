/**
 * The key that seals secrets at rest: BOXES_SECRET_KEY, or (outside production) one generated once into
 * <data dir>/secret-key. The data dir is BOXES_DATA_DIR, by default .data/ at the repository root.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, type Config } from '@boxes/config';
import { parseSecretKey } from '@boxes/core/crypto';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** Where the instance keeps its own files: BOXES_DATA_DIR, or .data/ at the repository root. */
export function dataDir(config: Pick<Config, 'dataDir'>): string {
  return path.resolve(config.dataDir ?? path.join(repoRoot, '.data'));
}

/** The file a key generated outside production is kept in. */
export const secretKeyFile = (config: Pick<Config, 'dataDir'>): string => path.join(dataDir(config), 'secret-key');

/** BOXES_SECRET_KEY, or (outside production) a key generated once into <data dir>/secret-key. */
export function resolveSecretKey(config: Config): Buffer {
  if (config.secretKey) return parseSecretKey(config.secretKey);
  if (config.nodeEnv === 'production') {
    throw new ConfigError('BOXES_SECRET_KEY is required in production (32 bytes as 64 hex characters: openssl rand -hex 32)');
  }
  const file = secretKeyFile(config);
  if (!fs.existsSync(file)) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    fs.writeFileSync(file, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
  }
  return parseSecretKey(fs.readFileSync(file, 'utf8').trim());
}

/**
 * The key this environment's instance uses, without making one (what a backup takes): BOXES_SECRET_KEY, or
 * outside production the kept file. Null when there is neither.
 */
export function existingSecretKey(config: Config): { key: Buffer; source: 'BOXES_SECRET_KEY' | 'file'; file: string | null } | null {
  if (config.secretKey) return { key: parseSecretKey(config.secretKey), source: 'BOXES_SECRET_KEY', file: null };
  // Production reads the key from BOXES_SECRET_KEY only.
  if (config.nodeEnv === 'production') return null;
  const file = secretKeyFile(config);
  if (!fs.existsSync(file)) return null;
  return { key: parseSecretKey(fs.readFileSync(file, 'utf8').trim()), source: 'file', file };
}
