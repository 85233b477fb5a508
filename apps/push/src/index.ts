/**
 * apps/push: the MQTT broker (aedes) behind mutual TLS. A client needs a certificate from this instance's CA
 * (POST /account/iot/provision), not revoked, with its MQTT client id equal to the certificate's client id; it
 * may subscribe only to boxes/accounts/<its account>/events and may not publish. Only the internal publisher
 * (the worker) publishes. In production the broker can run as its own process (or be replaced by an external
 * broker cluster: set MQTT_BROKER_URL and the worker publishes there through connectPublisher).
 */
import tls, { type TLSSocket } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { Aedes, type AedesOptions, type Client } from 'aedes';
import mqtt from 'mqtt';
import type { Config } from '@boxes/config';
import {
  certFingerprint,
  getOrCreateCa,
  INTERNAL_PUBLISHER_CN,
  issueInternalPublisherCertificate,
  issueServerCertificate,
  mqttTopic,
  type Services,
} from '@boxes/core';
import type { Logger } from 'pino';

/** Publishes one event JSON to a topic with QoS 1. */
export interface EventPublisher {
  publish(topic: string, payload: string): Promise<void>;
  close(): Promise<void>;
}

export interface PushHandle {
  port: number;
  /** In-process publishing into this broker. */
  publisher: EventPublisher;
  stop(): Promise<void>;
}

const REVOCATION_CHECK_MS = 5_000;

function authError(message: string): Error & { returnCode: number } {
  return Object.assign(new Error(message), { returnCode: 5 }); // 5: not authorized
}

export async function start(config: Config, deps: { svc: Services; log: Logger }): Promise<PushHandle> {
  const { svc, log } = deps;
  const ca = await getOrCreateCa(svc);
  // The names publishers and clients may reach it by: MAIL_HOST and the host of MQTT_PUBLIC_URL (clients), this
  // machine's host name (other processes of the instance: a container's host name, with MQTT_BROKER_URL naming it).
  const names = [config.mailHost, new URL(config.mqtt.publicUrl).hostname.replace(/^\[|\]$/g, ''), hostname(), 'localhost', '127.0.0.1', config.mqtt.host];
  const server = await issueServerCertificate(ca, [...new Set(names.filter(Boolean))]);
  /** Who each connected client is: an account (by credential) or the internal publisher. */
  const identity = new WeakMap<Client, { kind: 'account'; accountId: string; credentialId: string } | { kind: 'publisher' }>();
  const connected = new Set<Client>();

  const options: AedesOptions = {
    authenticate(client, _username, _password, done) {
      const socket = client.conn as TLSSocket;
      const peer = typeof socket.getPeerCertificate === 'function' ? socket.getPeerCertificate() : null;
      if (!peer?.raw) return done(authError('a client certificate is required'), false);
      const cn = Array.isArray(peer.subject?.CN) ? peer.subject.CN[0] : peer.subject?.CN;
      if (cn === INTERNAL_PUBLISHER_CN) {
        identity.set(client, { kind: 'publisher' });
        return done(null, true);
      }
      svc.db.iotCredential
        .findUnique({ where: { fingerprint: certFingerprint(peer.raw) } })
        .then((cred) => {
          if (!cred || cred.revokedAt) return done(authError('certificate revoked or unknown'), false);
          if (cred.notAfter.getTime() < Date.now()) return done(authError('certificate expired'), false);
          if (client.id !== cred.clientId || cn !== cred.clientId) return done(authError('client id does not match the certificate'), false);
          identity.set(client, { kind: 'account', accountId: cred.accountId, credentialId: cred.id });
          connected.add(client);
          done(null, true);
        })
        .catch((err) => {
          log.error({ err }, 'mqtt authentication failed');
          done(authError('server error'), false);
        });
    },
    authorizeSubscribe(client, sub, done) {
      const who = identity.get(client);
      if (who?.kind === 'account' && sub.topic === mqttTopic(who.accountId)) return done(null, sub);
      // Refused in the SUBACK (return code 0x80), as MQTT requires; an error here would drop the connection
      // instead of answering, taking the client's allowed subscription down with it.
      done(null, null);
    },
    authorizePublish(client, _packet, done) {
      if (client === null || identity.get(client)?.kind === 'publisher') return done(null);
      done(new Error('clients may not publish'));
    },
  };
  const broker = await Aedes.createBroker(options);
  broker.on('clientDisconnect', (client) => connected.delete(client));

  // A certificate revoked (or replaced) while its client is connected: disconnect it.
  const revocations = setInterval(() => {
    const clients = [...connected];
    const ids = clients.map((c) => identity.get(c)).flatMap((w) => (w?.kind === 'account' ? [w.credentialId] : []));
    if (!ids.length) return;
    svc.db.iotCredential
      .findMany({ where: { id: { in: ids }, revokedAt: { not: null } }, select: { id: true } })
      .then((revoked) => {
        const gone = new Set(revoked.map((r) => r.id));
        for (const c of clients) {
          const w = identity.get(c);
          if (w?.kind === 'account' && gone.has(w.credentialId)) c.close();
        }
      })
      .catch((err) => log.error({ err }, 'revocation check failed'));
  }, REVOCATION_CHECK_MS);
  revocations.unref();

  const tlsServer = tls.createServer(
    { key: server.keyPem, cert: server.certPem, ca: [ca.certPem], requestCert: true, rejectUnauthorized: true, minVersion: 'TLSv1.2' },
    (socket) => broker.handle(socket),
  );
  // Refused handshakes (no or foreign certificate) are expected: drop them (a listener means Node leaves that to us).
  tlsServer.on('tlsClientError', (_err, socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    tlsServer.once('error', reject);
    tlsServer.listen(config.mqtt.port, config.mqtt.host, () => resolve());
  });
  const port = (tlsServer.address() as AddressInfo).port;

  const publisher: EventPublisher = {
    publish: (topic, payload) =>
      new Promise((resolve, reject) =>
        broker.publish({ cmd: 'publish', topic, payload: Buffer.from(payload), qos: 1, retain: false, dup: false }, (err) => (err ? reject(err) : resolve())),
      ),
    close: async () => undefined,
  };
  return {
    port,
    publisher,
    async stop() {
      clearInterval(revocations);
      for (const c of connected) c.close();
      await new Promise<void>((resolve) => tlsServer.close(() => resolve()));
      await new Promise<void>((resolve) => broker.close(() => resolve()));
    },
  };
}

/** Publishing into a broker over the network (MQTT_BROKER_URL), as the internal publisher. */
export async function connectPublisher(config: Config, svc: Services, url = config.mqtt.brokerUrl): Promise<EventPublisher> {
  if (!url) throw new Error('connectPublisher needs MQTT_BROKER_URL');
  const ca = await getOrCreateCa(svc);
  const cert = await issueInternalPublisherCertificate(ca);
  const client = await mqtt.connectAsync(url, {
    clientId: `boxes-publisher-${process.pid}-${Math.random().toString(36).slice(2, 8)}`,
    key: cert.keyPem,
    cert: cert.certPem,
    ca: [ca.certPem],
    rejectUnauthorized: true,
    reconnectPeriod: 1000,
    connectTimeout: 10_000,
  });
  return {
    publish: async (topic, payload) => {
      await client.publishAsync(topic, payload, { qos: 1 });
    },
    close: async () => {
      await client.endAsync();
    },
  };
}
