/** Names and URLs of the test databases, derived from DATABASE_URL (default: local PostgreSQL). */
export const TEMPLATE_DB = 'boxes_test_template';

function base(): URL {
  return new URL(process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes');
}

export function databaseUrlFor(name: string): string {
  const u = base();
  u.pathname = `/${name}`;
  return u.toString();
}

export function adminUrl(): string {
  return databaseUrlFor('postgres');
}
