// Prisma 6 CLI configuration for authoring migrations (see src/cli.ts, which sets the variables read here).
import path from 'node:path';
import pg from 'pg';
import { defineConfig } from 'prisma/config';
import { PrismaPg } from '@prisma/adapter-pg';
import { RelabelingClient } from './src/relabel-system-types.ts';

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
  schema: path.join(import.meta.dirname, '.tmp', 'schema.prisma'),
  migrations: { path: path.join(import.meta.dirname, '..', '..', 'prisma', 'migrations') },
  async adapter() {
    const db = url.pathname.slice(1);
    const factory = new PrismaPg(pool(db));
    // The adapter's own shadow database (random name, dropped while its pool is still connected) fails to drop;
    // use a fixed one that src/cli.ts recreates before each run.
    factory.connectToShadowDb = () => new PrismaPg(pool(`${db}_shadow`)).connect();
    return factory;
  },
});
