/**
 * Whether a secret key opens the keys a database keeps sealed (the mail certificate's and the MQTT CA's in
 * platform_settings, the audit signing keys, the DKIM keys): a backup with another key would restore data
 * nothing can read, so both `boxes backup` and `boxes restore` check it.
 */
import type pg from 'pg';
import { open } from '@boxes/core';
import { compile, k, type Statement } from '@boxes/db';

async function query<R>(client: pg.ClientBase, statement: Statement<R>): Promise<R[]> {
  const c = compile(statement);
  return (await client.query(c.sql, c.parameters as unknown[])).rows as R[];
}

/** Opens one sealed value of each kind; answers what it opened, throws naming what did not open. */
export async function checkSealedKeys(client: pg.ClientBase, key: Buffer): Promise<string[]> {
  const sealed: { what: string; value: string }[] = [];
  for (const s of await query(client, k.selectFrom('platform_settings').select(['key', 'value']).where('key', 'in', ['mail_tls', 'mqtt_ca']).orderBy('key'))) {
    const keyEnc = (JSON.parse(s.value) as { keyEnc?: string }).keyEnc;
    if (keyEnc) sealed.push({ what: `platform_settings ${s.key}`, value: keyEnc });
  }
  for (const a of await query(client, k.selectFrom('audit_signing_keys').select(['id', 'private_key_enc']).orderBy('created_at', 'desc').limit(1))) {
    sealed.push({ what: `audit signing key ${a.id}`, value: a.private_key_enc });
  }
  for (const d of await query(client, k.selectFrom('domains').select(['name', 'dkim_private_key_enc']).orderBy('created_at', 'desc').limit(1))) {
    sealed.push({ what: `DKIM key of ${d.name}`, value: d.dkim_private_key_enc });
  }
  const failed = sealed.filter((s) => {
    try {
      open(key, s.value);
      return false;
    } catch {
      return true;
    }
  });
  if (failed.length) {
    throw new Error(`the secret key does not open ${failed.map((f) => f.what).join(', ')}: it is not the key this database was sealed with`);
  }
  return sealed.map((s) => s.what);
}
