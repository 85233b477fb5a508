/**
 * The container image (deploy/Dockerfile), built here with podman (chroot isolation: no registry, no container
 * runtime) on a base made by scripts/container-base-image.sh (debootstrap's Debian 12 and this machine's Node.js,
 * the shape of the official node:24-bookworm-slim). The image's file system is then mounted read-only and the
 * bundle run inside it with chroot, as the image's user, with the image's environment, on this machine's network:
 * `boxes migrate` creates and migrates a new database, `boxes start server worker mx` serves /readyz, `boxes
 * healthcheck` (the HEALTHCHECK) passes, an account signs up, sends to itself, to the outside with a PDF (the worker
 * delivers through the relay, a local SMTP sink, and reads the PDF's text) and receives through the MX. Secrets come from files (*_FILE) under
 * /run/secrets, as compose and Kubernetes give them. What the final stage must not hold is checked on its files.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import nodemailer from 'nodemailer';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { adminUrl, databaseUrlFor, deleteKeysWithPrefix, freePort, rest, signupAccount, waitFor } from '@boxes/testing';
import { MailSink } from './mail-send-helpers';
import { requireTool } from './mail-receive-helpers';

const execFileAsync = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
const IMAGE = 'localhost/boxes:test';
const UID = 10001;

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function run(cmd: string, args: string[], opts: { timeout?: number; env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  try {
    const { stdout } = await execFileAsync(cmd, args, {
      cwd: root,
      timeout: opts.timeout ?? 60_000,
      maxBuffer: 64 * 1024 * 1024,
      env: opts.env ?? process.env,
    });
    return stdout;
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')} failed: ${e.message}\n${(e.stdout ?? '').slice(-3000)}\n${(e.stderr ?? '').slice(-3000)}`);
  }
}

/** The shell that runs a command inside the image: its own mount namespace (nothing outlives the process). */
const CHROOT = `set -e
R="$1"; RUN="$2"; shift 2
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
mount --bind "$RUN" "$R/run"
exec chroot --userspec=${UID}:${UID} "$R" "$@"`;

function inImage(rootfs: string, runDir: string, env: Record<string, string>, args: string[]) {
  const child: ChildProcess = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', CHROOT, 'sh', rootfs, runDir, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, out: () => out, exited };
}

async function inImageDone(rootfs: string, runDir: string, env: Record<string, string>, args: string[], ms = 60_000) {
  const p = inImage(rootfs, runDir, env, args);
  const timer = setTimeout(() => p.child.kill('SIGKILL'), ms);
  const code = await p.exited;
  clearTimeout(timer);
  return { code, out: p.out() };
}

it('the image builds with podman, holds only the bundle, and runs it as its own user on a read-only root', async () => {
  for (const tool of ['podman', 'debootstrap', 'unshare', 'chroot']) await requireTool(tool);

  // The base: cached in podman's store (and .cache/container-base) after the first run on a machine.
  const base = (await run('bash', ['scripts/container-base-image.sh'], { timeout: 600_000 })).trim().split('\n').pop()!;
  expect(base).toMatch(/^localhost\/boxes-base:/);

  // Offline, from this machine's pnpm store and metadata cache (given to the build as volumes).
  const store = path.dirname((await run('pnpm', ['store', 'path'])).trim());
  const cacheDir = path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'pnpm');
  // The previous run's image goes (only ours: nothing else in podman's store is touched).
  await run('podman', ['image', 'rm', '--force', IMAGE]).catch(() => undefined);
  const started = Date.now();
  await run(
    'podman',
    [
      'build',
      '--isolation=chroot',
      '--layers=false',
      '--format=docker',
      // pnpm opens many store files at once; podman's build default (1024) makes it miss some.
      '--ulimit=nofile=20000:20000',
      '-f',
      'deploy/Dockerfile',
      '--build-arg',
      `BASE_IMAGE=${base}`,
      '--build-arg',
      'PNPM_STORE=/host-store',
      '--build-arg',
      'PNPM_FLAGS=--offline',
      '-v',
      `${store}:/host-store`,
      '--build-arg',
      'PNPM_CACHE=/host-cache',
      '-v',
      `${cacheDir}:/host-cache`,
      '-t',
      IMAGE,
      '.',
    ],
    { timeout: 900_000 },
  );
  console.log(`container-image: built ${IMAGE} in ${Math.round((Date.now() - started) / 1000)} s`);

  // The image's configuration.
  const [inspect] = JSON.parse(await run('podman', ['image', 'inspect', IMAGE])) as any[];
  const config = inspect.Config;
  expect(config.User).toBe(`${UID}:${UID}`);
  expect(config.Entrypoint).toEqual(['boxes']);
  expect(config.Cmd).toEqual(['start']);
  // Docker's image format keeps the HEALTHCHECK (the OCI format has no field for it).
  expect((inspect.Healthcheck ?? config.Healthcheck)?.Test).toEqual(['CMD', 'boxes', 'healthcheck']);
  for (const port of ['3000/tcp', '2525/tcp', '1465/tcp', '1993/tcp', '8883/tcp', '1053/tcp', '1053/udp', '9100/tcp'])
    expect(Object.keys(config.ExposedPorts ?? {})).toContain(port);
  const imageEnv = Object.fromEntries((config.Env as string[]).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  expect(imageEnv).toMatchObject({ NODE_ENV: 'production', HOST: '0.0.0.0', SMTP_HOST: '0.0.0.0', METRICS_PORT: '9100' });

  const rootfs = (await run('podman', ['image', 'mount', IMAGE])).trim();
  cleanups.push(() => run('podman', ['image', 'unmount', IMAGE]));
  const passwd = fs.readFileSync(path.join(rootfs, 'etc/passwd'), 'utf8');
  expect(passwd).toMatch(new RegExp(`^boxes:x:${UID}:${UID}:`, 'm'));

  // What the final stage holds: the bundle (no source maps), the production dependencies, migrations, SKILL.md;
  // no source, no TypeScript, no package manager, no compiler, no development dependency.
  const app = path.join(rootfs, 'app');
  expect(fs.readdirSync(app).sort()).toEqual(['SKILL.md', 'apps', 'deploy', 'node_modules', 'prisma']);
  expect(fs.readdirSync(path.join(app, 'apps'))).toEqual(['server']);
  expect(fs.readdirSync(path.join(app, 'apps/server')).sort()).toEqual(['dist', 'node_modules']);
  // The entries, the chunks they share or import on demand (esbuild names them <name>-<hash>.mjs) and the Prisma
  // query compiler's WebAssembly, which the client reads from beside them.
  const dist = fs.readdirSync(path.join(app, 'apps/server/dist')).sort();
  const entries = ['cli.mjs', 'extract-thread.mjs', 'main.mjs', 'query_compiler_fast_bg.postgresql.wasm'];
  expect(dist).toEqual(expect.arrayContaining(entries));
  expect(dist.filter((f) => !entries.includes(f) && !/^[a-z-]+-[A-Z0-9]{8}\.mjs$/.test(f))).toEqual([]);
  expect(fs.existsSync(path.join(app, 'packages'))).toBe(false);
  const ours = (await run('find', [app, '-path', `${app}/node_modules`, '-prune', '-o', '-type', 'f', '-print'])).trim().split('\n');
  expect(ours.filter((f) => /\.(ts|tsx|map)$/.test(f))).toEqual([]);
  for (const dir of ['usr/bin', 'usr/local/bin', 'bin', 'usr/sbin']) {
    for (const tool of ['pnpm', 'npm', 'npx', 'corepack', 'yarn', 'gcc', 'cc', 'c++', 'g++', 'make', 'tsc', 'tsx', 'esbuild', 'prisma'])
      expect(fs.existsSync(path.join(rootfs, dir, tool)), `${dir}/${tool}`).toBe(false);
  }
  const packages = fs.readdirSync(path.join(app, 'node_modules/.pnpm'));
  const dev =
    /^(typescript@|@typescript\+|esbuild@|@esbuild\+|prisma@|prisma-kysely@|@prisma\+engines|@prisma\+config|vitest@|@vitest\+|tsx@|turbo@|turbo-|@biomejs\+|playwright|@redocly\+|fast-check@)/;
  expect(packages.filter((p) => dev.test(p))).toEqual([]);
  expect(packages.length).toBeGreaterThan(100);
  // Native modules: msgpackr-extract's prebuilt binaries (BullMQ's faster MessagePack) and a rollup binding that
  // trpc-to-openapi declares as a dependency. A new one joins this list once it is seen loading below.
  const natives = (await run('find', [path.join(app, 'node_modules/.pnpm'), '-name', '*.node'])).trim().split('\n').filter(Boolean);
  expect(
    new Set(
      natives.map((f) =>
        path
          .relative(path.join(app, 'node_modules/.pnpm'), f)
          .split('/')[0]!
          .replace(/@[^@]*$/, ''),
      ),
    ),
  ).toEqual(new Set(['@msgpackr-extract+msgpackr-extract-linux-x64', '@rollup+rollup-linux-x64-gnu']));

  // Secrets as files under /run/secrets, readable by the image's user only.
  const runDir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-image-run-'));
  cleanups.push(async () => fs.rmSync(runDir, { recursive: true, force: true }));
  fs.chmodSync(runDir, 0o755);
  fs.mkdirSync(path.join(runDir, 'secrets'), { mode: 0o755 });
  // Named as the harness names its databases (boxes_test_<start>_...): a killed run's is dropped by a later run.
  const dbName = `boxes_test_${Math.floor(Date.now() / 1000)}_image_${Math.random().toString(36).slice(2, 8)}`;
  const sink = new MailSink();
  await sink.start();
  cleanups.push(() => sink.close());
  const secrets = {
    database_url: databaseUrlFor(dbName),
    boxes_secret_key: `${'ef'.repeat(32)}\n`,
    smtp_relay_url: `smtp://127.0.0.1:${sink.port}`,
  };
  for (const [name, value] of Object.entries(secrets)) {
    fs.writeFileSync(path.join(runDir, 'secrets', name), value, { mode: 0o400 });
    fs.chownSync(path.join(runDir, 'secrets', name), UID, UID);
  }
  cleanups.push(async () => {
    const admin = new pg.Client({ connectionString: adminUrl() });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`);
    await admin.end();
  });

  // Native modules load in the image (its glibc, its Node.js): each binary built for glibc and this Node.js's ABI
  // (or N-API), and msgpackr-extract through its own loader, as msgpackr finds it.
  const native = await inImageDone(rootfs, runDir, imageEnv, [
    'node',
    '-e',
    `const files = process.argv.slice(1).filter((f) => !/musl/.test(f) && (!/abi\\d+/.test(f) || f.includes('abi' + process.versions.modules)));
     for (const f of files) require(f);
     const { createRequire } = require('node:module');
     const dir = require('node:fs').readdirSync('/app/node_modules/.pnpm').find((d) => d.startsWith('msgpackr-extract@'));
     const m = createRequire('/app/node_modules/.pnpm/' + dir + '/node_modules/msgpackr-extract/')('msgpackr-extract');
     if (typeof m.extractStrings !== 'function') throw new Error('msgpackr-extract did not load');
     console.log('native ok', files.length, process.version, process.getuid());`,
    ...natives.map((f) => `/${path.relative(rootfs, f)}`),
  ]);
  expect(native.out).toMatch(new RegExp(`native ok [1-9]\\d* v24\\.\\S+ ${UID}`));
  expect(native.code).toBe(0);

  const [port, smtpPort, imapPort, submissionPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const redisPrefix = `boxes-image-${Date.now()}`;
  cleanups.push(() => deleteKeysWithPrefix(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', redisPrefix));
  const env = {
    ...imageEnv,
    // This machine's network: loopback only.
    HOST: '127.0.0.1',
    SMTP_HOST: '127.0.0.1',
    IMAP_HOST: '127.0.0.1',
    SUBMISSION_HOST: '127.0.0.1',
    METRICS_HOST: '127.0.0.1',
    PORT: String(port),
    SMTP_PORT: String(smtpPort),
    IMAP_PORT: String(imapPort),
    SUBMISSION_PORT: String(submissionPort),
    SITE_URL: `http://127.0.0.1:${port}`,
    DATABASE_URL_FILE: '/run/secrets/database_url',
    BOXES_SECRET_KEY_FILE: '/run/secrets/boxes_secret_key',
    SMTP_RELAY_URL_FILE: '/run/secrets/smtp_relay_url',
    REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    REDIS_PREFIX: redisPrefix,
    LOG_LEVEL: 'warn',
  };

  // `boxes migrate`: creates the database and applies every migration; a second run has nothing to do.
  const migrations = fs
    .readdirSync(path.join(root, 'prisma/migrations'))
    .filter((d) => fs.existsSync(path.join(root, 'prisma/migrations', d, 'migration.sql')));
  const first = await inImageDone(rootfs, runDir, env, ['boxes', 'migrate']);
  expect(first.out).toContain(`applied ${migrations.length} migration(s)`);
  expect(first.code).toBe(0);
  const second = await inImageDone(rootfs, runDir, env, ['boxes', 'migrate']);
  expect(second.out).toContain('up to date');
  expect(second.code).toBe(0);

  // `boxes start server worker mx`, as a compose service or a Kubernetes container would run it.
  const apps = inImage(rootfs, runDir, env, ['boxes', 'start', 'server', 'worker', 'mx']);
  cleanups.push(async () => {
    if (apps.child.exitCode === null) apps.child.kill('SIGKILL');
  });
  const url = await waitFor(
    'the apps to start in the image',
    () => {
      if (apps.child.exitCode !== null) throw new Error(`boxes start exited ${apps.child.exitCode}: ${apps.out()}`);
      return /boxes: running server, worker, mx \(pid \d+\); HTTP on ([^;\s]+)/.exec(apps.out())?.[1];
    },
    90_000,
  );
  expect((await fetch(`${url}/readyz`)).status).toBe(200);
  const health = await inImageDone(rootfs, runDir, env, ['boxes', 'healthcheck']);
  expect(health.code, health.out).toBe(0);

  // Sign up, send to itself (stored at once), to the outside (the worker delivers through the relay).
  const t = { apiBase: `${url}/api/v1` };
  const a = await signupAccount(t, 'image@example.com');
  const self = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: a.primaryAddress, subject: 'to myself', text: 'from the image' } });
  expect(self.status).toBe(200);
  // With a PDF: the worker reads its text in a thread (dist/extract-thread.mjs and the PDF reader it imports).
  const doc = await PDFDocument.create();
  doc.addPage().drawText('Quarterly figures from the image', { x: 50, y: 700, size: 12, font: await doc.embedFont(StandardFonts.Helvetica) });
  const pdf = Buffer.from(await doc.save()).toString('base64');
  const out = await rest(t, 'POST', '/messages/send', {
    key: a.apiKey,
    body: {
      to: 'someone@outside.example',
      subject: 'outward',
      text: 'through the relay',
      attachments: [{ filename: 'figures.pdf', content_type: 'application/pdf', content_b64: pdf }],
    },
  });
  expect(out.status).toBe(200);
  await waitFor('the relay to receive the message', () => sink.to('someone@outside.example').length > 0, 30_000);
  expect(sink.to('someone@outside.example')[0]!.raw.toString()).toContain('Subject: outward');
  const [attachment] = await waitFor(
    'the attachment text',
    async () => {
      const list = (await rest(t, 'GET', `/messages/${out.body.message_id}`, { key: a.apiKey })).body.body.attachments;
      return list.every((x: { text_status: string }) => x.text_status !== 'pending') ? list : null;
    },
    60_000,
  );
  const text = await rest(t, 'GET', `/messages/${out.body.message_id}/attachments/${attachment.id}/text`, { key: a.apiKey });
  expect(text.body).toMatchObject({ text_status: 'ready', text: expect.stringContaining('Quarterly figures from the image') });

  // Inbound: an outside sender through the MX.
  const mx = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
  await mx.sendMail({ from: 'friend@outside.example', to: a.primaryAddress, subject: 'inbound', text: 'through the MX' });
  const received = await waitFor(
    'both messages to be in the box',
    async () => {
      const r = await rest(t, 'GET', '/messages?direction=received', { key: a.apiKey });
      const subjects = (r.body.messages ?? []).map((m: { subject: string }) => m.subject);
      return subjects.includes('to myself') && subjects.includes('inbound') ? subjects : null;
    },
    30_000,
  );
  expect(received).toEqual(expect.arrayContaining(['to myself', 'inbound']));

  apps.child.kill('SIGTERM');
  expect(await apps.exited).toBe(0);
  // Nothing was written in the image: it ran on its read-only mount (the run's own files are on tmpfs and /run).
  expect(apps.out()).not.toMatch(/EROFS|EACCES/);
}, 1_200_000);
