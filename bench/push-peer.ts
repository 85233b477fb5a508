/**
 * The outside world of bench:push, in a worker thread so it does not share the service's event loop: the https
 * webhook receiver and the MQTT subscribers, and (webhook endpoints mode) a dead endpoint that accepts
 * connections and never answers. Latency = arrival time here minus the event's created_at (both Date.now() of
 * the same machine). The receiver keeps latencies per path (/hook: the account callbacks; /ep/<n>: the n-th
 * endpoint of every account) and counts events that reached a path twice (every answer is 200).
 */
import https from 'node:https';
import net, { type AddressInfo, type Socket } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import mqtt from 'mqtt';
import pg from 'pg';
import { watchTimerLag } from './lag';

interface Subscriber {
  clientId: string;
  key: string;
  cert: string;
  ca: string;
  topic: string;
}

const port = parentPort!;
const { keyPem, certPem } = workerData as { keyPem: string; certPem: string };
const byPath = new Map<string, { latency: number[]; created: number[]; seen: Set<string>; twice: number }>();
const mqttLatency: number[] = [];
/** Each MQTT latency's event created_at (ms), beside it: the bench's timeline puts the latencies in their second. */
const mqttCreated: number[] = [];
const seenMqtt = new Set<string>();
const clients: mqtt.MqttClient[] = [];
/** This thread's event-loop delays (a 10 ms timer 20 ms or more late): [when it was due, ms late], for the timeline. */
const lags: [number, number][] = [];
const lagTimer = watchTimerLag(lags);

const receiver = https.createServer({ key: keyPem, cert: certPem, keepAliveTimeout: 30_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const at = Date.now();
    const e = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: string; type: string; created_at: string };
    if (e.type === 'mail.delivered') {
      const pathname = req.url ?? '/';
      let p = byPath.get(pathname);
      if (!p) {
        p = { latency: [], created: [], seen: new Set(), twice: 0 };
        byPath.set(pathname, p);
      }
      if (p.seen.has(e.id)) p.twice += 1;
      else {
        p.seen.add(e.id);
        const created = Date.parse(e.created_at);
        p.latency.push(at - created);
        p.created.push(created);
      }
    }
    res.writeHead(200).end();
  });
});

/**
 * What this database's PostgreSQL backends wait on (pg_stat_activity every 10 ms, from a connection to another
 * database, so its own work is not counted as this database's): [when, the waits seen], for the timeline.
 */
const waits: [number, string[]][] = [];
let sampler: pg.Client | null = null;
let sampling = false;
async function sampleWaits(url: string, database: string): Promise<void> {
  sampler = new pg.Client({ connectionString: url });
  await sampler.connect();
  sampling = true;
  const text = `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' ' || coalesce(left(query, 24), '') AS w FROM pg_stat_activity
    WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()
    UNION ALL SELECT backend_type || ' ' || wait_event_type || ':' || wait_event FROM pg_stat_activity
    WHERE backend_type IN ('checkpointer', 'walwriter', 'autovacuum worker') AND wait_event_type IN ('IO', 'Lock', 'LWLock')
    UNION ALL SELECT 'autovacuum ' || query FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND datname = $1`;
  while (sampling) {
    const at = Date.now();
    const r = await sampler.query<{ w: string }>(text, [database]).catch(() => null);
    if (r?.rows.length) waits.push([at, r.rows.map((x) => x.w)]);
    await new Promise((res) => setTimeout(res, 10));
  }
}

port.on(
  'message',
  async (msg: { op: 'subscribe'; mqttPort: number; subscribers: Subscriber[]; waitsUrl?: string; database?: string } | { op: 'results' } | { op: 'close' }) => {
    if (msg.op === 'subscribe') {
      if (msg.waitsUrl) void sampleWaits(msg.waitsUrl, msg.database!);
      for (const s of msg.subscribers) {
        const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${msg.mqttPort}`, {
          clientId: s.clientId,
          key: s.key,
          cert: s.cert,
          ca: [s.ca],
          reconnectPeriod: 0,
          connectTimeout: 10_000,
        });
        client.on('message', (_topic, payload) => {
          const at = Date.now();
          const e = JSON.parse(payload.toString('utf8')) as { id: string; type: string; created_at: string };
          if (e.type === 'mail.delivered' && !seenMqtt.has(e.id)) {
            seenMqtt.add(e.id);
            const created = Date.parse(e.created_at);
            mqttLatency.push(at - created);
            mqttCreated.push(created);
          }
        });
        await client.subscribeAsync(s.topic, { qos: 1 });
        clients.push(client);
      }
      port.postMessage({ op: 'subscribed' });
    } else if (msg.op === 'results') {
      const paths = Object.fromEntries([...byPath].map(([k, v]) => [k, { latency: v.latency, twice: v.twice }]));
      const hook = byPath.get('/hook');
      port.postMessage({
        op: 'results',
        webhook: hook?.latency ?? [],
        webhookCreated: hook?.created ?? [],
        mqtt: mqttLatency,
        mqttCreated,
        paths,
        deadConnections,
        lags,
        waits,
      });
    } else {
      clearInterval(lagTimer);
      sampling = false;
      await sampler?.end().catch(() => undefined);
      for (const sock of deadSockets) sock.destroy();
      await new Promise<void>((r) => dead.close(() => r()));
      await Promise.all(clients.map((c) => c.endAsync().catch(() => undefined)));
      await new Promise<void>((r) => receiver.close(() => r()));
      receiver.closeAllConnections();
      port.postMessage({ op: 'closed' });
    }
  },
);

// The dead endpoint: takes the connection and never says a word (not even the TLS handshake).
let deadConnections = 0;
const deadSockets = new Set<Socket>();
const dead = net.createServer((sock) => {
  deadConnections += 1;
  deadSockets.add(sock);
  sock.on('close', () => deadSockets.delete(sock));
  sock.on('error', () => undefined);
});

dead.listen(0, '127.0.0.1', () =>
  receiver.listen(0, '127.0.0.1', () =>
    port.postMessage({ op: 'listening', port: (receiver.address() as AddressInfo).port, deadPort: (dead.address() as AddressInfo).port }),
  ),
);
