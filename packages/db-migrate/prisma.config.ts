// Prisma 6 CLI configuration for authoring migrations (see src/diff.ts and src/cli.ts, which set the variables read here).
import path from 'node:path';
import pg from 'pg';
import { defineConfig } from 'prisma/config';
import { PrismaPg } from '@prisma/adapter-pg';
import { RelabelingClient, withCharacterColumns } from './src/relabel-system-types.ts';

const url = new URL(process.env.MIGRATE_DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes_migrate_dev');

/** Discrete fields, not a connection string: with a string the shadow database silently becomes the main one. */
function pool(database: string): pg.Pool {
  return new pg.Pool({
    host: url.hostname,
    port: Number(url.port || 5432),
    user: decodeURIComponent(url.username || 'postgres'),
    password: decodeURIComponent(url.password) || undefined,
    database,
    Client: RelabelingClient,
  });
}

export default defineConfig({
  experimental: { adapter: true },
  engine: 'js',
  schema: process.env.MIGRATE_SCHEMA ?? path.join(import.meta.dirname, '.tmp', 'schema.prisma'),
  migrations: { path: path.join(import.meta.dirname, '..', '..', 'prisma', 'migrations') },
  async adapter() {
    const db = url.pathname.slice(1);
    const factory = new PrismaPg(pool(db));
    const connect = factory.connect.bind(factory);
    factory.connect = async () => withCharacterColumns(await connect());
    // The adapter's own shadow database (random name, dropped while its pool is still connected) fails to drop;
    // use a fixed one that src/diff.ts recreates before each run.
    factory.connectToShadowDb = async () => withCharacterColumns(await new PrismaPg(pool(`${db}_shadow`)).connect());
    return factory;
  },
});
