/**
 * The outside world of bench:push, in a worker thread so it does not share the service's event loop: the https
 * webhook receiver and the MQTT subscribers. Latency = arrival time here minus the event's created_at (both
 * Date.now() of the same machine).
 */
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import mqtt from 'mqtt';

interface Subscriber {
  clientId: string;
  key: string;
  cert: string;
  ca: string;
  topic: string;
}

const port = parentPort!;
const { keyPem, certPem } = workerData as { keyPem: string; certPem: string };
const webhook: number[] = [];
const mqttLatency: number[] = [];
const seenWebhook = new Set<string>();
const seenMqtt = new Set<string>();
const clients: mqtt.MqttClient[] = [];

const receiver = https.createServer({ key: keyPem, cert: certPem, keepAliveTimeout: 30_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const at = Date.now();
    const e = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: string; type: string; created_at: string };
    if (e.type === 'mail.delivered' && !seenWebhook.has(e.id)) {
      seenWebhook.add(e.id);
      webhook.push(at - Date.parse(e.created_at));
    }
    res.writeHead(200).end();
  });
});

port.on('message', async (msg: { op: 'subscribe'; mqttPort: number; subscribers: Subscriber[] } | { op: 'results' } | { op: 'close' }) => {
  if (msg.op === 'subscribe') {
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
          mqttLatency.push(at - Date.parse(e.created_at));
        }
      });
      await client.subscribeAsync(s.topic, { qos: 1 });
      clients.push(client);
    }
    port.postMessage({ op: 'subscribed' });
  } else if (msg.op === 'results') {
    port.postMessage({ op: 'results', webhook, mqtt: mqttLatency });
  } else {
    await Promise.all(clients.map((c) => c.endAsync().catch(() => undefined)));
    await new Promise<void>((r) => receiver.close(() => r()));
    receiver.closeAllConnections();
    port.postMessage({ op: 'closed' });
  }
});

receiver.listen(0, '127.0.0.1', () => port.postMessage({ op: 'listening', port: (receiver.address() as AddressInfo).port }));
