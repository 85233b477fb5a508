/**
 * The deployment files as their tools read them: deploy/compose.yaml through docker-compose's own `config` (which
 * validates it against the Compose specification's schema and resolves profiles, anchors and variables), and
 * deploy/k8s through kubectl's kustomize (the base and the scaled overlay), rendered and then checked for what
 * Boxes needs: the apps each container starts, probes on /healthz and /readyz, secrets from files, settings that
 * exist, ports that match, budgets that select their pods, and nothing running as root.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { FILE_SETTINGS, loadConfig } from '@boxes/config';
import { requireTool } from './mail-receive-helpers';

const execFileAsync = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
const deploy = path.join(root, 'deploy');
const APPS = ['server', 'worker', 'mx', 'push', 'dns'];

/** Every setting loadConfig reads (the keys of its schema), and the <NAME>_FILE forms of the secret ones. */
const SETTINGS = new Set([
  ...[...fs.readFileSync(path.join(root, 'packages/config/src/index.ts'), 'utf8').matchAll(/^ {2}([A-Z][A-Z0-9_]+): /gm)].map((m) => m[1]!),
  ...FILE_SETTINGS.map((n) => `${n}_FILE`),
]);

async function run(cmd: string, args: string[], cwd = root): Promise<string> {
  try {
    return (await execFileAsync(cmd, args, { cwd, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 })).stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')}: ${e.message}\n${e.stderr ?? ''}`);
  }
}

/** An app list after `start`, each a Boxes app. */
function startedApps(args: string[]): string[] {
  expect(args[0]).toBe('start');
  const apps = args.slice(1);
  for (const a of apps) expect(APPS).toContain(a);
  return apps;
}

describe('deploy/compose.yaml', () => {
  /** `docker-compose config`: the file as the tool reads it, with its defaults (no .env, no variables of ours). */
  async function composeConfig(...profiles: string[]): Promise<any> {
    await requireTool('docker-compose');
    const envFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-compose-')), 'empty.env');
    fs.writeFileSync(envFile, '');
    const args = ['-f', 'compose.yaml', '--env-file', envFile, ...profiles.flatMap((p) => ['--profile', p]), 'config'];
    const { stdout } = await execFileAsync('docker-compose', args, {
      cwd: deploy,
      timeout: 60_000,
      env: { PATH: process.env.PATH, HOME: process.env.HOME },
    }).catch((err: { stderr?: string; message: string }) => {
      throw new Error(`docker-compose ${args.join(' ')}: ${err.message}\n${err.stderr ?? ''}`);
    });
    fs.rmSync(path.dirname(envFile), { recursive: true, force: true });
    return parseYaml(stdout);
  }

  it('is valid; by default PostgreSQL, Redis, the migration and the apps, each app in its own service', async () => {
    const c = await composeConfig();
    // What `up` starts without a profile (docker-compose 1 lists the profiled services too).
    const always = Object.keys(c.services).filter((n) => !c.services[n].profiles);
    expect(always.sort()).toEqual(['dns', 'front', 'migrate', 'postgres', 'push', 'redis', 'worker']);
    const boxes = ['migrate', 'front', 'worker', 'push', 'dns'].map((n) => [n, c.services[n]] as const);
    // One image for every app, read-only, no capabilities, secrets from files.
    for (const [name, s] of boxes) {
      expect(s.image, name).toBe('boxes:latest');
      expect(s.build.dockerfile, name).toBe('deploy/Dockerfile');
      expect(s.read_only, name).toBe(true);
      expect(s.cap_drop, name).toEqual(['ALL']);
      expect(s.environment.BOXES_SECRET_KEY_FILE, name).toBe('/run/secrets/boxes_secret_key');
      expect(s.environment.DATABASE_URL_FILE, name).toBe('/run/secrets/database_url');
      expect(s.environment.BOXES_SECRET_KEY, name).toBeUndefined();
      expect(s.secrets.map((x: { source: string }) => x.source).sort(), name).toEqual(['boxes_secret_key', 'database_url']);
      for (const key of Object.keys(s.environment)) expect(SETTINGS.has(key), `${name}: ${key} is not a setting`).toBe(true);
      // The defaults of the file are settings loadConfig takes (secrets aside).
      expect(() => loadConfig({ ...s.environment, DATABASE_URL_FILE: '', BOXES_SECRET_KEY_FILE: '' }), name).not.toThrow();
    }
    expect(c.services.migrate.command).toEqual(['migrate']);
    expect(c.services.migrate.depends_on.postgres.condition).toBe('service_healthy');
    for (const name of ['front', 'worker', 'push', 'dns']) expect(c.services[name].depends_on.migrate.condition).toBe('service_completed_successfully');
    expect(startedApps(c.services.front.command)).toEqual(['server', 'mx']);
    expect(startedApps(c.services.worker.command)).toEqual(['worker']);
    expect(startedApps(c.services.push.command)).toEqual(['push']);
    expect(startedApps(c.services.dns.command)).toEqual(['dns']);
    // Every app is started somewhere.
    expect(new Set(boxes.flatMap(([, s]) => (s.command[0] === 'start' ? s.command.slice(1) : [])))).toEqual(new Set(APPS));
    // The workers publish through the broker, by the host name its certificate carries.
    expect(c.services.worker.environment.MQTT_BROKER_URL).toBe('mqtts://push:8883');
    expect(c.services.push.hostname).toBe('push');
    expect(c.services.push.environment.MQTT_BROKER_URL).toBeUndefined();

    // Public ports onto the apps' unprivileged ones.
    const published = (s: any) => (s.ports ?? []).map((p: any) => `${p.published}->${p.target}/${p.protocol ?? 'tcp'}`).sort();
    expect(published(c.services.front)).toEqual(['25->2525/tcp', '3000->3000/tcp', '465->1465/tcp', '993->1993/tcp']);
    expect(published(c.services.dns)).toEqual(['53->1053/tcp', '53->1053/udp']);
    expect(published(c.services.push)).toEqual(['8883->8883/tcp']);
    expect(published(c.services.worker)).toEqual([]);

    // What must persist is in named volumes; Redis never evicts queue keys.
    const mount = (v: any) => (typeof v === 'string' ? v.replace(/:rw$/, '') : `${v.source}:${v.target}`);
    expect(c.services.postgres.volumes.map(mount)).toEqual(['postgres-data:/var/lib/postgresql/data']);
    expect(c.services.redis.volumes.map(mount)).toEqual(['redis-data:/data']);
    expect(Object.keys(c.volumes)).toEqual(expect.arrayContaining(['postgres-data', 'redis-data']));
    expect(c.services.redis.command.join(' ')).toContain('--maxmemory-policy noeviction');
    expect(c.services.postgres.environment.POSTGRES_PASSWORD_FILE).toBe('/run/secrets/postgres_password');
    expect(c.services.worker.deploy.replicas).toBe(1);
  });

  it('the spam and powerdns profiles add rspamd and PowerDNS with its read-only role', async () => {
    const c = await composeConfig('spam', 'powerdns');
    expect(Object.keys(c.services).sort()).toEqual(['dns', 'front', 'migrate', 'postgres', 'powerdns', 'powerdns-grant', 'push', 'redis', 'rspamd', 'worker']);
    expect(c.services.rspamd.profiles).toEqual(['spam']);
    expect(c.services.powerdns.profiles).toEqual(['powerdns']);
    expect(c.services['powerdns-grant'].profiles).toEqual(['powerdns']);
    // PowerDNS takes port 53 in place of the dns app (started with --scale dns=0).
    expect(c.services.powerdns.ports.map((p: any) => `${p.published}->${p.target}/${p.protocol ?? 'tcp'}`).sort()).toEqual(['53->53/tcp', '53->53/udp']);
    expect(c.services.rspamd.build.context).toBe(path.join(root, 'deploy/rspamd'));
    expect(c.services.powerdns.build.context).toBe(path.join(root, 'deploy/powerdns'));
    expect(c.services.powerdns.depends_on['powerdns-grant'].condition).toBe('service_completed_successfully');
    expect(c.services['powerdns-grant'].depends_on.migrate.condition).toBe('service_completed_successfully');
    for (const f of ['rspamd/Dockerfile', 'rspamd/rspamd.conf', 'powerdns/Dockerfile', 'powerdns/start.sh', 'powerdns/grant.sql', 'powerdns/pdns.conf'])
      expect(fs.existsSync(path.join(deploy, f)), f).toBe(true);
    // The role may read the zones' views and tables, nothing else.
    const grant = fs.readFileSync(path.join(deploy, 'powerdns/grant.sql'), 'utf8');
    expect(grant).toMatch(/^GRANT SELECT ON pdns_domains, pdns_records, dns_zones, dns_records TO pdns;$/m);
    expect(grant.match(/^GRANT/gm)).toHaveLength(1);
  });
});

describe('deploy/k8s', () => {
  async function render(dir: string): Promise<any[]> {
    await requireTool('kubectl');
    const docs = parseAllDocuments(await run('kubectl', ['kustomize', path.join(deploy, 'k8s', dir)]));
    for (const d of docs) expect(d.errors).toEqual([]);
    return docs.map((d) => d.toJS());
  }
  const byKind = (objs: any[], kind: string) => objs.filter((o) => o.kind === kind);
  const named = (objs: any[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);

  it('the base renders: Deployments with probes, resources and a non-root read-only container; Services, budgets, config', async () => {
    const objs = await render('base');
    expect(objs.map((o) => `${o.kind}/${o.metadata.name.replace(/-[a-z0-9]{10}$/, '')}`).sort()).toEqual(
      [
        'ConfigMap/boxes-config',
        'Deployment/boxes-dns',
        'Deployment/boxes-front',
        'Deployment/boxes-push',
        'Deployment/boxes-worker',
        'Namespace/boxes',
        'PodDisruptionBudget/boxes-dns',
        'PodDisruptionBudget/boxes-front',
        'PodDisruptionBudget/boxes-worker',
        'Service/boxes-dns',
        'Service/boxes-http',
        'Service/boxes-mail',
        'Service/boxes-push',
      ].sort(),
    );
    for (const o of objs) {
      expect(o.apiVersion, o.kind).toMatch(/^(v1|apps\/v1|policy\/v1)$/);
      if (o.kind !== 'Namespace') expect(o.metadata.namespace, `${o.kind}/${o.metadata.name}`).toBe('boxes');
    }
    const config = byKind(objs, 'ConfigMap')[0];
    for (const key of Object.keys(config.data)) expect(SETTINGS.has(key), `${key} is not a setting`).toBe(true);
    expect(() => loadConfig(config.data)).not.toThrow();

    const apps: string[] = [];
    for (const d of byKind(objs, 'Deployment')) {
      const name = d.metadata.name;
      const pod = d.spec.template.spec;
      expect(d.spec.selector.matchLabels, name).toEqual(d.spec.template.metadata.labels);
      expect(pod.securityContext, name).toMatchObject({ runAsNonRoot: true, runAsUser: 10001 });
      expect(pod.terminationGracePeriodSeconds, name).toBeGreaterThanOrEqual(30);
      for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
        expect(c.image, name).toBe('boxes:latest');
        expect(c.securityContext, name).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });
        expect(c.resources.requests.memory, name).toBeTruthy();
        expect(c.resources.limits.memory, name).toBeTruthy();
        expect(c.envFrom[0].configMapRef.name, name).toBe(config.metadata.name);
        const env = Object.fromEntries(c.env.map((e: { name: string; value: string }) => [e.name, e.value]));
        for (const key of Object.keys(env)) expect(SETTINGS.has(key), `${name}: ${key}`).toBe(true);
        for (const key of ['DATABASE_URL_FILE', 'REDIS_URL_FILE', 'BOXES_SECRET_KEY_FILE'])
          expect(env[key], `${name}: ${key}`).toMatch(/^\/run\/secrets\/boxes\//);
        expect(c.volumeMounts.find((m: any) => m.name === 'secrets')).toMatchObject({ mountPath: '/run/secrets/boxes', readOnly: true });
      }
      expect(pod.volumes.find((v: any) => v.name === 'secrets').secret.secretName).toBe('boxes-secrets');
      const [c] = pod.containers;
      apps.push(...startedApps(c.args));
      const ports = new Map(c.ports.map((p: any) => [p.name, p.containerPort]));
      // Probes: the front's on /healthz and /readyz of its HTTP server; the others' on /healthz of METRICS_PORT.
      if (c.args.includes('server')) {
        expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'http' });
        expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
        expect(ports.get('http')).toBe(3000);
      } else {
        expect(c.readinessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
        expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
        expect(ports.get('metrics')).toBe(9100);
      }
      expect(c.startupProbe.httpGet.path).toBe('/healthz');
    }
    expect(new Set(apps)).toEqual(new Set(APPS));
    const front = named(objs, 'Deployment', 'boxes-front');
    expect(front.spec.template.spec.initContainers[0].args).toEqual(['migrate']);
    const worker = named(objs, 'Deployment', 'boxes-worker').spec.template.spec.containers[0];
    expect(worker.env.find((e: any) => e.name === 'MQTT_BROKER_URL').value).toBe('mqtts://boxes-push:8883');
    const push = named(objs, 'Deployment', 'boxes-push');
    expect(push.spec.replicas).toBe(1);
    expect(push.spec.template.spec.hostname).toBe('boxes-push');
    expect(named(objs, 'Service', 'boxes-push')).toBeTruthy();

    // Each Service selects a Deployment's pods and targets ports those containers name, with their protocol.
    const expected: Record<string, string[]> = {
      'boxes-http': ['80->http/TCP'],
      'boxes-mail': ['25->smtp/TCP', '465->submission/TCP', '993->imap/TCP'],
      'boxes-dns': ['53->dns-udp/UDP', '53->dns-tcp/TCP'],
      'boxes-push': ['8883->mqtt/TCP'],
    };
    for (const s of byKind(objs, 'Service')) {
      const target = byKind(objs, 'Deployment').find((d) => Object.entries(s.spec.selector).every(([k, v]) => d.spec.template.metadata.labels[k] === v));
      expect(target, s.metadata.name).toBeTruthy();
      const cports = target.spec.template.spec.containers[0].ports;
      const got = s.spec.ports.map((p: any) => `${p.port}->${p.targetPort}/${p.protocol ?? 'TCP'}`);
      expect(got, s.metadata.name).toEqual(expected[s.metadata.name]);
      for (const p of s.spec.ports) {
        const cp = cports.find((x: any) => x.name === p.targetPort);
        expect(cp, `${s.metadata.name} ${p.targetPort}`).toBeTruthy();
        expect(cp.protocol ?? 'TCP').toBe(p.protocol ?? 'TCP');
      }
    }
    for (const b of byKind(objs, 'PodDisruptionBudget')) {
      const d = named(objs, 'Deployment', b.metadata.name);
      expect(b.spec.selector.matchLabels, b.metadata.name).toEqual(d.spec.selector.matchLabels);
      expect(b.spec.minAvailable).toBeLessThan(d.spec.replicas);
    }
  });

  it('the scaled overlay raises the replicas of the fronts, workers and DNS servers, never the broker', async () => {
    const objs = await render('overlays/scaled');
    const replicas = Object.fromEntries(byKind(objs, 'Deployment').map((d) => [d.metadata.name, d.spec.replicas]));
    expect(replicas).toEqual({ 'boxes-front': 4, 'boxes-worker': 6, 'boxes-dns': 3, 'boxes-push': 1 });
  });

  it('the example Secret holds the three files the containers read, and no real key', () => {
    const secret = parseYaml(fs.readFileSync(path.join(deploy, 'k8s/secret.example.yaml'), 'utf8'));
    expect(secret).toMatchObject({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'boxes-secrets', namespace: 'boxes' } });
    expect(Object.keys(secret.stringData).sort()).toEqual(['boxes_secret_key', 'database_url', 'redis_url']);
    expect(secret.stringData.boxes_secret_key).toMatch(/^0{64}$/);
  });
});
