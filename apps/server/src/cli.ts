/**
 * The operator CLI: `pnpm boxes start [app...]` runs apps (see main.ts: server, worker, mx, push, dns; none
 * named: all of them, as `pnpm start`), and `pnpm boxes admin <command>` works on the database named by
 * DATABASE_URL.
 *
 *   pnpm boxes migrate                         create the database if missing and apply pending migrations, then exit
 *   pnpm boxes admin questions                 open support questions, oldest first
 *   pnpm boxes admin answer <sq_id> <text...>  answer one (support.answered goes to the asking account)
 *   pnpm boxes admin features                  open feature requests with their votes
 *   pnpm boxes admin ship <fr_id> [note...]    mark one shipped (feature_request.shipped to requester and voters)
 *   pnpm boxes admin close-protection-off <acct_id>  turn an account's close protection off (as support)
 *   pnpm boxes admin rotate-audit-key          retire the audit signing key and make a new one (old keys stay served)
 *
 * and `pnpm boxes backup <file>` / `pnpm boxes restore <file>` write and restore an archive of the database and
 * the keys outside it (src/backup; docs/operator/backup.md).
 */
// Everything beyond Node is imported where a command uses it: `start` runs main.ts, which loads only the apps
// asked for, so a process of the mail app alone does not hold the admin commands' and the backup's code (the
// backup names the API version, which would load the HTTP API's whole router and OpenAPI generator).
export {};

/** The usage text, with the backup's lines (from the backup's module, loaded only for a command other than start). */
const usageWith = (backupUsage: string) => `usage:
  pnpm boxes start [server] [worker] [mx] [push] [dns]
  pnpm boxes migrate
  pnpm boxes admin questions
  pnpm boxes admin answer <question id> <answer text>
  pnpm boxes admin features
  pnpm boxes admin ship <feature request id> [note]
  pnpm boxes admin close-protection-off <account id>
  pnpm boxes admin rotate-audit-key
${backupUsage}`;

async function main(argv: string[]): Promise<number> {
  const [area, command, id, ...rest] = argv;
  const { backupCommand, BACKUP_USAGE } = await import('./backup/command');
  const usage = usageWith(BACKUP_USAGE);
  if (area === 'backup' || area === 'restore') return backupCommand(area, argv.slice(1), usage);
  if (area === 'migrate' && !command) return migrateDatabase();
  if (area !== 'admin' || !command) {
    console.error(usage);
    return 2;
  }
  const { loadConfig } = await import('@boxes/config');
  const { answerQuestion, disableCloseProtection, openFeatures, openQuestions, rotateSigningKey, shipFeature } = await import('@boxes/core');
  const { closeDb, createDb } = await import('@boxes/db');
  const { resolveSecretKey } = await import('./secret-key');
  const config = loadConfig();
  const db = createDb(config.databaseUrl, { max: 2 });
  try {
    switch (command) {
      case 'questions': {
        const qs = await openQuestions(db);
        if (!qs.length) console.log('no open questions');
        for (const q of qs) {
          console.log(`${q.id}  ${q.accountId}  ${q.updatedAt.toISOString()}  ${q.subject}`);
          for (const m of q.messages) console.log(`    [${m.author}] ${m.body.replace(/\s+/g, ' ').slice(0, 200)}`);
        }
        return 0;
      }
      case 'answer': {
        const text = rest.join(' ').trim();
        if (!id || !text) throw new Error('answer needs a question id and the answer text');
        const r = await answerQuestion(db, id, text);
        console.log(`answered ${r.question_id} (account ${r.account_id}); support.answered appended`);
        return 0;
      }
      case 'features': {
        const fs = await openFeatures(db);
        if (!fs.length) console.log('no open feature requests');
        for (const f of fs) console.log(`${f.id}  votes ${f._count.votes}  ${f.title}`);
        return 0;
      }
      case 'ship': {
        if (!id) throw new Error('ship needs a feature request id');
        const r = await shipFeature(db, id, rest.join(' ').trim() || undefined);
        console.log(`shipped ${r.id}; feature_request.shipped sent to ${r.notified} account(s)`);
        return 0;
      }
      case 'close-protection-off': {
        if (!id) throw new Error('close-protection-off needs an account id');
        const r = await disableCloseProtection({ db }, id);
        console.log(r.changed ? `close protection of ${id} is off; account.close_protection.disabled appended` : `close protection of ${id} was already off`);
        return 0;
      }
      case 'rotate-audit-key': {
        const r = await rotateSigningKey({ db, secretKey: resolveSecretKey(config) });
        console.log(`audit signing key ${r.current} is current${r.retired ? `; ${r.retired} is retired (still served for verification)` : ''}`);
        return 0;
      }
      default:
        console.error(usage);
        return 2;
    }
  } finally {
    await closeDb(db);
  }
}

/**
 * What every start does first, on its own: a deployment step before new processes start (a Kubernetes Job, a
 * one-shot compose service). Concurrent runs are safe (the migrations take an advisory lock).
 */
async function migrateDatabase(): Promise<number> {
  const { loadConfig } = await import('@boxes/config');
  const { ensureDatabase, migrate } = await import('@boxes/db');
  const config = loadConfig();
  await ensureDatabase(config.directDatabaseUrl);
  const { applied } = await migrate(config.directDatabaseUrl);
  console.log(applied.length ? `applied ${applied.length} migration(s): ${applied.join(', ')}` : 'the database is up to date (no pending migrations)');
  return 0;
}

if (process.argv[2] === 'start') {
  // The apps run until stopped; main.ts reads the same arguments.
  await import('./main');
} else {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: Error) => {
      console.error(`boxes: ${err.message}`);
      process.exit(1);
    },
  );
}
