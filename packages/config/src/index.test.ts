/** loadConfig: defaults on an empty environment, derived URLs, and one readable line per bad setting. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './index';

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`loadConfig(${JSON.stringify(env)}) did not throw`);
}

describe('loadConfig', () => {
  it('runs on an empty environment with the documented defaults', () => {
    expect(loadConfig({})).toEqual({
      nodeEnv: 'development',
      host: '127.0.0.1',
      port: 3000,
      siteUrl: 'http://localhost:3000',
      apiBaseUrl: 'http://localhost:3000/api/v1',
      mcpUrl: undefined,
      baseDomain: 'boxes.localhost',
      mailHost: 'mail.boxes.localhost',
      nameservers: ['ns1.boxes.localhost', 'ns2.boxes.localhost'],
      databaseUrl: 'postgresql://postgres@127.0.0.1:5432/boxes',
      directDatabaseUrl: 'postgresql://postgres@127.0.0.1:5432/boxes',
      redisUrl: 'redis://127.0.0.1:6379',
      redisSentinel: null,
      secretKey: undefined,
      dataDir: undefined,
      redisPrefix: 'boxes',
      smtp: {
        host: '127.0.0.1',
        port: 2525,
        maxMessageBytes: 25 * 1024 * 1024,
        maxRecipients: 100,
        maxConnections: 500,
        tlsCertFile: undefined,
        tlsKeyFile: undefined,
        relayUrl: undefined,
        relayConnections: 50,
        sendingIps: [],
        sendingIpWarmupCaps: [5000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000],
        staticRoutes: undefined,
        deliveryPort: 25,
        forwardConfirmationsPerDay: 20,
        socketTimeoutMs: 60_000,
      },
      http: { headersTimeoutMs: 20_000, requestTimeoutMs: 120_000, idleTimeoutMs: 60_000, sseHeartbeatMs: 15_000, sseMaxStreamsPerKey: 10 },
      deliveryRetryScale: 1,
      mailClients: {
        imapHost: '127.0.0.1',
        imapPort: 1993,
        imapLoginTimeoutMs: 60_000,
        imapAutologoutMs: 1_860_000,
        submissionHost: '127.0.0.1',
        submissionPort: 1465,
        imapPublicHost: '127.0.0.1',
        submissionPublicHost: '127.0.0.1',
        auth: { userMaxFailures: 10, addressMaxFailures: 30, windowSeconds: 900, freeFailures: 3, delayMs: 1000 },
      },
      deliveryConcurrency: 50,
      workerSweepIntervalMs: 5000,
      bulk: {
        coolOffSeconds: 600,
        minCoolOffSeconds: 600,
        maxBatchSize: 1000,
        maxActiveJobs: 3,
        maxBounceRate: 0.02,
        maxComplaintRate: 0.005,
        concurrency: 64,
        connections: 16,
      },
      billing: { introductoryPrice: false, cycleMs: 3_600_000, paymentProvider: 'local' },
      noticeFrom: 'noreply@boxes.localhost',
      webhook: { allowPrivate: false, caFile: undefined, timeoutMs: 10_000, retryScale: 1, maxEndpoints: 10 },
      mqtt: { host: '127.0.0.1', port: 8883, publicUrl: 'mqtts://127.0.0.1:8883', brokerUrl: undefined },
      logLevel: 'info',
      trustProxy: false,
      signupRateLimitPerHour: 30,
      keyRateLimit: { perMinute: 600, windowSeconds: 60, quota: 600 },
      metrics: { host: '127.0.0.1', port: null },
      dns: {
        host: '127.0.0.1',
        port: 1053,
        resolvers: [],
        hostmaster: 'hostmaster.boxes.localhost',
        publicAddresses: [],
        claimTtlDays: 7,
        moveGraceDays: 30,
        verifyIntervalMs: 60_000,
      },
      audit: { cycleMs: 3_600_000, deletionGraceDays: 30, exportLinkTtlDays: 7 },
      review: { ttlMs: 72 * 3_600_000 },
      trust: { rspamdUrl: undefined, rspamdTimeoutMs: 5000 },
    });
  });

  it('reads the DNS settings: resolvers and public addresses as lists, the hostmaster without its trailing dot', () => {
    expect(
      loadConfig({
        DNS_RESOLVERS: ' 127.0.0.1:5300, ::1 ,',
        PUBLIC_ADDRESSES: '192.0.2.1,2001:db8::1',
        DNS_HOSTMASTER: 'DNS.Example.com.',
        DNS_PORT: '53',
        DOMAIN_CLAIM_TTL_DAYS: '3',
      }).dns,
    ).toMatchObject({
      resolvers: ['127.0.0.1:5300', '::1'],
      publicAddresses: ['192.0.2.1', '2001:db8::1'],
      hostmaster: 'dns.example.com',
      port: 53,
      claimTtlDays: 3,
    });
    expect(() => loadConfig({ DOMAIN_CLAIM_TTL_DAYS: '0' })).toThrow(/DOMAIN_CLAIM_TTL_DAYS/);
  });

  it('the per-key rate limit: a per-minute rate counted in windows of KEY_RATE_LIMIT_WINDOW_SECONDS; 0 turns it off', () => {
    expect(loadConfig({ KEY_RATE_LIMIT_PER_MINUTE: '0' }).keyRateLimit.quota).toBe(0);
    expect(loadConfig({ KEY_RATE_LIMIT_PER_MINUTE: '120' }).keyRateLimit).toEqual({ perMinute: 120, windowSeconds: 60, quota: 120 });
    expect(loadConfig({ KEY_RATE_LIMIT_WINDOW_SECONDS: '10' }).keyRateLimit).toEqual({ perMinute: 600, windowSeconds: 10, quota: 100 });
    // A window always lets at least one request through.
    expect(loadConfig({ KEY_RATE_LIMIT_PER_MINUTE: '1', KEY_RATE_LIMIT_WINDOW_SECONDS: '1' }).keyRateLimit.quota).toBe(1);
    expect(configError({ KEY_RATE_LIMIT_PER_MINUTE: '-1' }).message).toMatch(/\bKEY_RATE_LIMIT_PER_MINUTE\b/);
    expect(configError({ KEY_RATE_LIMIT_WINDOW_SECONDS: '0' }).message).toMatch(/\bKEY_RATE_LIMIT_WINDOW_SECONDS\b/);
  });

  it('derives the site and API URLs from PORT, or takes SITE_URL without its trailing slash', () => {
    expect(loadConfig({ PORT: '8080' })).toMatchObject({ port: 8080, siteUrl: 'http://localhost:8080', apiBaseUrl: 'http://localhost:8080/api/v1' });
    expect(loadConfig({ SITE_URL: 'https://mail.example.com/' })).toMatchObject({
      siteUrl: 'https://mail.example.com',
      apiBaseUrl: 'https://mail.example.com/api/v1',
    });
    // The API base ends in /api/v1 exactly once.
    expect(loadConfig({ SITE_URL: 'https://x.example//' }).apiBaseUrl).toBe('https://x.example/api/v1');
  });

  it('bulk jobs: the default cool-off is never below the floor; rates and concurrency are read', () => {
    expect(loadConfig({ BULK_COOL_OFF_SECONDS: '10', BULK_MIN_COOL_OFF_SECONDS: '60' }).bulk.coolOffSeconds).toBe(60);
    expect(
      loadConfig({
        BULK_COOL_OFF_SECONDS: '1',
        BULK_MIN_COOL_OFF_SECONDS: '0',
        BULK_MAX_BATCH_SIZE: '5000',
        BULK_MAX_ACTIVE_JOBS: '10',
        BULK_MAX_BOUNCE_RATE: '0.01',
        BULK_CONCURRENCY: '8',
        BULK_SMTP_CONNECTIONS: '4',
      }).bulk,
    ).toEqual({
      coolOffSeconds: 1,
      minCoolOffSeconds: 0,
      maxBatchSize: 5000,
      maxActiveJobs: 10,
      maxBounceRate: 0.01,
      maxComplaintRate: 0.005,
      concurrency: 8,
      connections: 4,
    });
    expect(() => loadConfig({ BULK_MAX_BOUNCE_RATE: '2' })).toThrow(/BULK_MAX_BOUNCE_RATE/);
    expect(() => loadConfig({ BULK_MAX_BATCH_SIZE: '5001' })).toThrow(/BULK_MAX_BATCH_SIZE/);
  });

  it('reads the other settings', () => {
    const c = loadConfig({
      NODE_ENV: 'production',
      HOST: '0.0.0.0',
      BASE_DOMAIN: 'Agents.Example.COM',
      NAMESERVERS: ' NS1.example.net, ns2.example.net ,,',
      DATABASE_URL: 'postgres://u:p@db:5433/x',
      REDIS_URL: 'rediss://cache:6380/2',
      BOXES_SECRET_KEY: 'ab'.repeat(32),
      LOG_LEVEL: 'warn',
      TRUST_PROXY: 'yes',
    });
    expect(c).toMatchObject({
      nodeEnv: 'production',
      host: '0.0.0.0',
      baseDomain: 'agents.example.com',
      mailHost: 'mail.agents.example.com',
      nameservers: ['ns1.example.net', 'ns2.example.net'],
      databaseUrl: 'postgres://u:p@db:5433/x',
      redisUrl: 'rediss://cache:6380/2',
      secretKey: 'ab'.repeat(32),
      logLevel: 'warn',
      trustProxy: true,
    });
    expect(loadConfig({ MAIL_HOST: 'MX.Example.org' }).mailHost).toBe('mx.example.org');
    // The relay's connections: one per delivery in flight unless set.
    expect(loadConfig({ DELIVERY_CONCURRENCY: '80' }).smtp.relayConnections).toBe(80);
    expect(loadConfig({ DELIVERY_CONCURRENCY: '80', SMTP_RELAY_CONNECTIONS: '4' }).smtp.relayConnections).toBe(4);
    expect(() => loadConfig({ SMTP_RELAY_CONNECTIONS: '0' })).toThrow(/SMTP_RELAY_CONNECTIONS/);
    for (const [v, want] of [
      ['true', true],
      ['1', true],
      ['yes', true],
      ['false', false],
      ['0', false],
      ['no', false],
      ['', false],
    ] as const) {
      expect(loadConfig({ TRUST_PROXY: v }).trustProxy, v).toBe(want);
    }
  });

  it('advertises hosts clients can reach: the listener on a local instance, MAIL_HOST on a public one', () => {
    const hosts = (env: Record<string, string>) => {
      const c = loadConfig(env);
      return { imap: c.mailClients.imapPublicHost, submission: c.mailClients.submissionPublicHost, mqtt: c.mqtt.publicUrl };
    };
    // mail.boxes.localhost resolves nowhere: the address each server listens on.
    expect(hosts({})).toEqual({ imap: '127.0.0.1', submission: '127.0.0.1', mqtt: 'mqtts://127.0.0.1:8883' });
    expect(hosts({ IMAP_HOST: '0.0.0.0', SUBMISSION_HOST: 'localhost', MQTT_HOST: '::1', MQTT_PORT: '9883' })).toEqual({
      imap: '127.0.0.1',
      submission: 'localhost',
      mqtt: 'mqtts://[::1]:9883',
    });
    expect(hosts({ MAIL_HOST: 'mail.dev.localhost', MQTT_HOST: '::' })).toEqual({ imap: '127.0.0.1', submission: '127.0.0.1', mqtt: 'mqtts://127.0.0.1:8883' });
    // A public host is what clients use, wherever the servers listen.
    expect(hosts({ BASE_DOMAIN: 'agents.example.com', IMAP_HOST: '0.0.0.0', MQTT_HOST: '0.0.0.0' })).toEqual({
      imap: 'mail.agents.example.com',
      submission: 'mail.agents.example.com',
      mqtt: 'mqtts://mail.agents.example.com:8883',
    });
    expect(hosts({ MAIL_HOST: 'MX.Example.org' }).imap).toBe('mx.example.org');
    expect(hosts({ MQTT_PUBLIC_URL: 'mqtts://push.example.org:443' }).mqtt).toBe('mqtts://push.example.org:443');
  });

  it('takes the mail certificate and its key together', () => {
    expect(loadConfig({ SMTP_TLS_CERT_FILE: '/etc/boxes/cert.pem', SMTP_TLS_KEY_FILE: '/etc/boxes/key.pem' }).smtp).toMatchObject({
      tlsCertFile: '/etc/boxes/cert.pem',
      tlsKeyFile: '/etc/boxes/key.pem',
    });
    expect(configError({ SMTP_TLS_CERT_FILE: '/etc/boxes/cert.pem' }).message).toMatch(/SMTP_TLS_CERT_FILE and SMTP_TLS_KEY_FILE: set both/);
    expect(configError({ SMTP_TLS_KEY_FILE: '/etc/boxes/key.pem' }).message).toMatch(/set both/);
  });

  it('applies overrides, keeping the derived URLs consistent', () => {
    const c = loadConfig({}, { port: 4100 });
    expect(c).toMatchObject({ port: 4100, siteUrl: 'http://localhost:4100', apiBaseUrl: 'http://localhost:4100/api/v1' });
    expect(loadConfig({}, { siteUrl: 'https://o.example' }).apiBaseUrl).toBe('https://o.example/api/v1');
  });

  it('reads process.env when given nothing', () => {
    const saved = process.env.BASE_DOMAIN;
    process.env.BASE_DOMAIN = 'from-env.example';
    try {
      expect(loadConfig().baseDomain).toBe('from-env.example');
    } finally {
      if (saved === undefined) delete process.env.BASE_DOMAIN;
      else process.env.BASE_DOMAIN = saved;
    }
  });

  it('DIRECT_DATABASE_URL defaults to DATABASE_URL; a pooler URL and the direct one are kept apart', () => {
    expect(loadConfig({ DATABASE_URL: 'postgresql://u@db:5432/x' }).directDatabaseUrl).toBe('postgresql://u@db:5432/x');
    const c = loadConfig({ DATABASE_URL: 'postgresql://u@pgbouncer:6432/x', DIRECT_DATABASE_URL: 'postgresql://u@db:5432/x' });
    expect([c.databaseUrl, c.directDatabaseUrl]).toEqual(['postgresql://u@pgbouncer:6432/x', 'postgresql://u@db:5432/x']);
    expect(configError({ DIRECT_DATABASE_URL: 'mysql://db/x' }).message).toMatch(/^invalid configuration: DIRECT_DATABASE_URL: /);
  });

  it('REDIS_SENTINELS (host:port list) with REDIS_SENTINEL_NAME and its password; refuses malformed entries', () => {
    expect(loadConfig({ REDIS_SENTINELS: '' }).redisSentinel).toBeNull();
    expect(
      loadConfig({ REDIS_SENTINELS: '10.0.0.5:26379, sentinel-b:26380,[::1]:26381', REDIS_SENTINEL_NAME: 'mail-queues', REDIS_SENTINEL_PASSWORD: 's3cret' })
        .redisSentinel,
    ).toEqual({
      sentinels: [
        { host: '10.0.0.5', port: 26379 },
        { host: 'sentinel-b', port: 26380 },
        { host: '::1', port: 26381 },
      ],
      name: 'mail-queues',
      password: 's3cret',
    });
    expect(loadConfig({ REDIS_SENTINELS: '127.0.0.1:26379' }).redisSentinel).toEqual({
      sentinels: [{ host: '127.0.0.1', port: 26379 }],
      name: 'boxes',
      password: undefined,
    });
    for (const bad of ['127.0.0.1', '127.0.0.1:0', 'host:99999', 'a b:1']) {
      expect(configError({ REDIS_SENTINELS: bad }).message).toMatch(/^invalid configuration: REDIS_SENTINELS: bad entry/);
    }
    expect(configError({ REDIS_SENTINELS: '127.0.0.1:26379', REDIS_SENTINEL_NAME: 'a name' }).message).toMatch(/REDIS_SENTINEL_NAME/);
  });

  it('reads SENDING_IPS (ip=helo name pairs) and the warm-up caps; refuses malformed ones', () => {
    const c = loadConfig({ SENDING_IPS: '127.0.0.2=Mail2.Example.net, ::1=mail6.example.net', SENDING_IP_WARMUP_CAPS: '5000,20000' });
    expect(c.smtp.sendingIps).toEqual([
      { ip: '127.0.0.2', heloName: 'mail2.example.net' },
      { ip: '::1', heloName: 'mail6.example.net' },
    ]);
    expect(c.smtp.sendingIpWarmupCaps).toEqual([5000, 20_000]);
    for (const bad of ['127.0.0.2', '999.1.1.1=mail.example.net', '127.0.0.2=bad name'])
      expect(configError({ SENDING_IPS: bad }).message).toMatch(/\bSENDING_IPS\b/);
    for (const bad of ['0', '5000,x', '1.5']) expect(configError({ SENDING_IP_WARMUP_CAPS: bad }).message).toMatch(/\bSENDING_IP_WARMUP_CAPS\b/);
  });

  it('a bad value gives a ConfigError: one line naming the variable', () => {
    const cases: Record<string, string> = {
      PORT: 'abc',
      DATABASE_URL: 'mysql://root@127.0.0.1/boxes',
      REDIS_URL: 'http://127.0.0.1:6379',
      BASE_DOMAIN: 'not a domain',
      LOG_LEVEL: 'loud',
      TRUST_PROXY: 'maybe',
      NODE_ENV: 'staging',
      SITE_URL: 'ftp://example.com',
    };
    for (const [name, value] of Object.entries(cases)) {
      const err = configError({ [name]: value });
      expect(err.name).toBe('ConfigError');
      expect(err.message, name).not.toContain('\n');
      expect(err.message, name).toMatch(new RegExp(`\\b${name}\\b`));
      // Only the variable that is wrong is named.
      for (const other of Object.keys(cases).filter((n) => n !== name)) expect(err.message, `${name} vs ${other}`).not.toMatch(new RegExp(`\\b${other}\\b`));
    }
    for (const port of ['70000', '-1', '3.5']) expect(configError({ PORT: port }).message).toMatch(/\bPORT\b/);
  });

  it('several bad values are all named, still on one line', () => {
    const err = configError({ PORT: 'x', REDIS_URL: 'nope' });
    expect(err.message).not.toContain('\n');
    expect(err.message).toMatch(/\bPORT\b/);
    expect(err.message).toMatch(/\bREDIS_URL\b/);
  });

  it('an empty PORT is not silently port 0 (a random port)', () => {
    let port: number | undefined;
    try {
      port = loadConfig({ PORT: '' }).port;
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toMatch(/\bPORT\b/);
      return;
    }
    expect(port).toBe(3000);
  });

  it('reads secrets from <NAME>_FILE (container secrets), without the trailing newline; refuses both, a missing or an empty file', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'boxes-config-'));
    try {
      const key = path.join(dir, 'secret_key');
      const db = path.join(dir, 'database_url');
      writeFileSync(key, `${'ab'.repeat(32)}\n`);
      writeFileSync(db, 'postgresql://boxes:s3cret@db:5432/boxes');
      const c = loadConfig({ BOXES_SECRET_KEY_FILE: key, DATABASE_URL_FILE: db, REDIS_URL_FILE: '' });
      expect(c.secretKey).toBe('ab'.repeat(32));
      expect(c.databaseUrl).toBe('postgresql://boxes:s3cret@db:5432/boxes');
      expect(c.redisUrl).toBe('redis://127.0.0.1:6379');
      expect(configError({ BOXES_SECRET_KEY_FILE: key, BOXES_SECRET_KEY: 'cd'.repeat(32) }).message).toMatch(/BOXES_SECRET_KEY and BOXES_SECRET_KEY_FILE/);
      expect(configError({ REDIS_URL_FILE: path.join(dir, 'missing') }).message).toMatch(/REDIS_URL_FILE: cannot read .*ENOENT/);
      writeFileSync(path.join(dir, 'empty'), '\n');
      expect(configError({ SMTP_RELAY_URL_FILE: path.join(dir, 'empty') }).message).toMatch(/SMTP_RELAY_URL_FILE: .* is empty/);
      // What the file holds is checked like the variable itself.
      writeFileSync(db, 'mysql://root@db/boxes');
      expect(configError({ DATABASE_URL_FILE: db }).message).toMatch(/\bDATABASE_URL\b/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
