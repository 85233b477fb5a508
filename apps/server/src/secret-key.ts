/** The key that seals secrets at rest: BOXES_SECRET_KEY, or (outside production) one generated once into .data/secret-key. */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, type Config } from '@boxes/config';
import { parseSecretKey } from '@boxes/core';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** BOXES_SECRET_KEY, or (outside production) a key generated once into .data/secret-key. */
export function resolveSecretKey(config: Config): Buffer {
  if (config.secretKey) return parseSecretKey(config.secretKey);
  if (config.nodeEnv === 'production') {
    throw new ConfigError('BOXES_SECRET_KEY is required in production (32 bytes as 64 hex characters: openssl rand -hex 32)');
  }
  const file = path.join(repoRoot, '.data', 'secret-key');
  if (!fs.existsSync(file)) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    fs.writeFileSync(file, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
  }
  return parseSecretKey(fs.readFileSync(file, 'utf8').trim());
}
