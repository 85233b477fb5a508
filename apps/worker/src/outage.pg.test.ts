/**
 * listenForever against a real PostgreSQL: the listeners of a process share one connection per database, each
 * gets its own channel's notifications, all of them catch up after that connection is cut, and the connection
 * ends with the last of them.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenForever } from './outage';

const base = new URL(process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes');
const urlOf = (name: string) => Object.assign(new URL(base), { pathname: `/${name}` }).toString();
const name = `boxes_test_listen_${randomBytes(4).toString('hex')}`;
const log = pino({ level: 'silent' });

async function on<T>(database: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: urlOf(database) });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}
const listeningBackends = () =>
  on('postgres', async (c) => (await c.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%'`, [name])).rows);
const notify = (channel: string, payload: string) => on(name, (c) => c.query('SELECT pg_notify($1, $2)', [channel, payload]));
async function until(check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 200 && !(await check()); i++) await new Promise((r) => setTimeout(r, 25));
  expect(await check()).toBe(true);
}

beforeAll(() => on('postgres', (c) => c.query(`CREATE DATABASE "${name}"`)));
afterAll(() => on('postgres', (c) => c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)));

describe('listenForever', () => {
  it('shares one connection between channels, reconnects for all of them, and ends with the last listener', async () => {
    const got: Record<string, string[]> = { one: [], two: [] };
    const reconnected: Record<string, number> = { one: 0, two: 0 };
    const listen = (ch: 'one' | 'two') =>
      listenForever({
        databaseUrl: urlOf(name),
        channel: `boxes_test_${ch}`,
        log,
        onNotify: (p) => got[ch]!.push(p),
        onReconnect: () => (reconnected[ch] = (reconnected[ch] ?? 0) + 1),
      });
    const [one, two] = await Promise.all([listen('one'), listen('two')]);
    expect(await listeningBackends()).toHaveLength(1);

    await notify('boxes_test_one', 'a');
    await notify('boxes_test_two', 'b');
    await until(() => got.one!.length === 1 && got.two!.length === 1);
    expect(got).toEqual({ one: ['a'], two: ['b'] });

    // The connection is cut (as by a restart): both listeners are told, and hear their channels again.
    const [backend] = await listeningBackends();
    await on('postgres', (c) => c.query('SELECT pg_terminate_backend($1)', [backend!.pid]));
    await until(() => reconnected.one === 1 && reconnected.two === 1);
    await until(async () => (await listeningBackends()).length === 1);
    await notify('boxes_test_one', 'c');
    await notify('boxes_test_two', 'd');
    await until(() => got.one!.length === 2 && got.two!.length === 2);
    expect(got).toEqual({ one: ['a', 'c'], two: ['b', 'd'] });

    await one.close();
    await notify('boxes_test_two', 'e');
    await until(() => got.two!.length === 3);
    expect(got.one).toEqual(['a', 'c']);
    await two.close();
    await until(async () => (await listeningBackends()).length === 0);
  }, 30_000);
});
