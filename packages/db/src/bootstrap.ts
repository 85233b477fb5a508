/** Creating the database when it is missing, and turning connection failures into one actionable line. */
import pg from 'pg';

export class ServiceUnavailableError extends Error {
  override name = 'ServiceUnavailableError';
}

function where(url: URL): string {
  return `${url.hostname}:${url.port || 5432}`;
}

/** One line saying what is wrong with the PostgreSQL connection and what to do about it. */
export function describeConnectionError(databaseUrl: string, err: unknown): string {
  const url = new URL(databaseUrl);
  const code = (err as { code?: string })?.code;
  const message = (err as Error)?.message ?? String(err);
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'ETIMEDOUT') {
    return `PostgreSQL is not reachable at ${where(url)} (${code}). Start it (on Debian: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start) or set DATABASE_URL.`;
  }
  if (code === '28P01' || code === '28000') {
    return `PostgreSQL at ${where(url)} refused the credentials in DATABASE_URL: ${message}`;
  }
  return `PostgreSQL at ${where(url)}: ${message}`;
}

/** Connects to the server's maintenance database and creates the target database if it does not exist. */
export async function ensureDatabase(databaseUrl: string): Promise<void> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.slice(1));
  if (!name) throw new ServiceUnavailableError('DATABASE_URL must name a database (…/boxes)');
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
  } catch (err) {
    throw new ServiceUnavailableError(describeConnectionError(databaseUrl, err));
  }
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (!rowCount) {
      try {
        await client.query(`CREATE DATABASE "${name.replaceAll('"', '""')}"`);
      } catch (err) {
        // Another instance created it between our check and our create: 42P04, or 23505 when both raced inside
        // the catalog insert.
        const code = (err as { code?: string }).code;
        if (code !== '42P04' && code !== '23505') throw err;
      }
    }
  } finally {
    await client.end();
  }
}
