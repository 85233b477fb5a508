/**
 * The outside world of a benchmark, in a worker thread so its work never runs on the event loop of the server
 * under test: the clients (keep-alive HTTP, pooled SMTP) and the remote MX that receives deliveries (a sink
 * that counts recipients). The main thread calls it through LoadClient (request/response by id).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parentPort, Worker } from 'node:worker_threads';
import nodemailer, { type Transporter } from 'nodemailer';
import { SMTPServer } from 'smtp-server';

/** A time comparable across threads (ms since the epoch, sub-millisecond precision). */
export const now = (): number => performance.timeOrigin + performance.now();

export interface SendAccount {
  apiKey: string;
  primaryAddress: string;
}

export interface RunResult {
  started: number;
  ok: number;
  statuses: Record<string, number>;
  firstError: string | null;
  latencies: number[];
  t0: number;
  t1: number;
}

export type LoadRequest =
  | { op: 'startSink' }
  | { op: 'waitSink'; target: number; deadline: number }
  | { op: 'httpSends'; apiBase: string; accounts: SendAccount[]; count: number; concurrency: number; startSeq: number; deadline: number; sinkDomain: string }
  | { op: 'smtpSends'; port: number; boxes: string[]; count: number; connections: number; tls: boolean; startSeq: number; deadline: number }
  | { op: 'close' };

interface SinkState {
  server: SMTPServer;
  count: number;
  seen: Set<string>;
  duplicates: number;
  waiters: { target: number; resolve: () => void }[];
}

/** Runs `total` tasks with at most `concurrency` in flight; stops starting new ones after the deadline. */
async function runPool(total: number, concurrency: number, deadline: number, task: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const worker = async () => {
    while (next < total && Date.now() < deadline) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, worker));
  return next;
}

function post(agent: http.Agent, url: string, body: unknown, key: string): Promise<{ status: number; body: string }> {
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: 'POST',
        agent,
        timeout: 60_000,
        headers: { 'content-type': 'application/json', 'content-length': payload.length, authorization: `Bearer ${key}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('request timed out after 60 s')));
    req.on('error', reject);
    req.end(payload);
  });
}

function serve(): void {
  const port = parentPort!;
  let sink: SinkState | null = null;
  let transport: Transporter | null = null;
  let transportKey = '';

  const handlers = {
    async startSink() {
      const state: SinkState = { server: null as unknown as SMTPServer, count: 0, seen: new Set(), duplicates: 0, waiters: [] };
      // No STARTTLS, no reverse DNS; the worker's pooled transport reuses connections, so smtp-server's 100 ms
      // early-talker pause (no option turns it off) is paid once per connection.
      state.server = new SMTPServer({
        authOptional: true,
        disabledCommands: ['STARTTLS', 'AUTH'],
        disableReverseLookup: true,
        logger: false,
        onData(stream, session, cb) {
          stream.on('data', () => undefined);
          stream.on('end', () => {
            for (const r of session.envelope.rcptTo) {
              state.count++;
              if (state.seen.has(r.address)) state.duplicates++;
              else state.seen.add(r.address);
            }
            state.waiters = state.waiters.filter((w) => (state.count >= w.target ? (w.resolve(), false) : true));
            cb();
          });
        },
      });
      await new Promise<void>((r) => state.server.listen(0, '127.0.0.1', () => r()));
      sink = state;
      return { port: (state.server.server.address() as AddressInfo).port };
    },

    async waitSink(req: { target: number; deadline: number }) {
      const s = sink!;
      const at = await new Promise<number | null>((resolve) => {
        if (s.count >= req.target) return resolve(now());
        const timer = setTimeout(() => resolve(null), Math.max(0, req.deadline - Date.now()));
        s.waiters.push({ target: req.target, resolve: () => (clearTimeout(timer), resolve(now())) });
      });
      return { at, count: s.count, duplicates: s.duplicates };
    },

    async httpSends(req: Extract<LoadRequest, { op: 'httpSends' }>): Promise<RunResult> {
      // A new agent per run: a keep-alive connection left idle between runs may have been closed by the server.
      const agent = new http.Agent({ keepAlive: true, maxSockets: req.concurrency });
      const latencies: number[] = [];
      const statuses: Record<string, number> = {};
      let ok = 0;
      let firstError: string | null = null;
      const t0 = now();
      const started = await runPool(req.count, req.concurrency, req.deadline, async (i) => {
        const n = req.startSeq + i;
        const a = req.accounts[n % req.accounts.length]!;
        const body = {
          to: `Recipient ${n} <r${n}@${req.sinkDomain}>`,
          subject: `Benchmark message ${n}`,
          text: `Hello,\n\nthis is benchmark message ${n}, sent by ${a.primaryAddress}.\n\nRegards,\nthe benchmark\n`,
        };
        const s = performance.now();
        try {
          const r = await post(agent, `${req.apiBase}/messages/send`, body, a.apiKey);
          latencies.push(performance.now() - s);
          statuses[r.status] = (statuses[r.status] ?? 0) + 1;
          if (r.status === 200) ok++;
          else firstError ??= `${r.status} ${r.body.slice(0, 300)}`;
        } catch (err) {
          statuses['0'] = (statuses['0'] ?? 0) + 1;
          firstError ??= (err as Error).message;
        }
      });
      const t1 = now();
      agent.destroy();
      return { started, ok, statuses, firstError, latencies, t0, t1 };
    },

    async smtpSends(req: Extract<LoadRequest, { op: 'smtpSends' }>): Promise<RunResult> {
      // One pooled transport for every run: its connections stay open (maxMessages Infinity).
      const key = `${req.port}:${req.connections}:${req.tls}`;
      if (!transport || transportKey !== key) {
        transport?.close();
        transport = nodemailer.createTransport({
          pool: true,
          maxConnections: req.connections,
          maxMessages: Infinity,
          host: '127.0.0.1',
          port: req.port,
          secure: false,
          ignoreTLS: !req.tls,
          tls: { rejectUnauthorized: false },
          name: 'sender.bench.test',
        });
        transportKey = key;
      }
      const t = transport;
      const latencies: number[] = [];
      let ok = 0;
      let failed = 0;
      let firstError: string | null = null;
      const t0 = now();
      // A few messages queued per connection, so no connection waits for the next message.
      const started = await runPool(req.count, req.connections * 2, req.deadline, async (i) => {
        const n = req.startSeq + i;
        const s = performance.now();
        try {
          await t.sendMail({
            from: `Sender ${n % 50} <sender${n % 50}@outside.test>`,
            to: req.boxes[n % req.boxes.length]!,
            subject: `Inbound benchmark message ${n}`,
            text: `Hello,\n\nthis is inbound benchmark message ${n}.\n\n${'Some words to give the body a usual size. '.repeat(10)}\n\nRegards,\nthe benchmark\n`,
            messageId: `<bench-${n}@outside.test>`,
          });
          latencies.push(performance.now() - s);
          ok++;
        } catch (err) {
          failed++;
          firstError ??= (err as Error).message;
        }
      });
      const t1 = now();
      return { started, ok, statuses: { accepted: ok, failed }, firstError, latencies, t0, t1 };
    },

    async close() {
      transport?.close();
      transport = null;
      const s = sink;
      sink = null;
      if (s) await new Promise<void>((r) => s.server.close(() => r()));
      return {};
    },
  };

  port.on('message', (msg: { id: number; req: LoadRequest }) => {
    const { op, ...args } = msg.req;
    (handlers[op] as (a: unknown) => Promise<unknown>)(args).then(
      (result) => {
        port.postMessage({ id: msg.id, result });
        if (op === 'close') port.close();
      },
      (err: Error) => port.postMessage({ id: msg.id, error: err.stack ?? err.message }),
    );
  });
}

/** The main thread's handle on the load worker. */
export class LoadClient {
  private worker: Worker;
  private nextId = 0;
  private pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();

  constructor() {
    // tsx's loader does not reach worker threads on Node 20: register it in the worker, then load this file.
    const tsx = import.meta.resolve('tsx/esm/api');
    const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(import.meta.url)}); })`;
    this.worker = new Worker(boot, { eval: true });
    this.worker.on('message', (m: { id: number; result?: unknown; error?: string }) => {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.error !== undefined) p?.reject(new Error(`load worker: ${m.error}`));
      else p?.resolve(m.result);
    });
    this.worker.on('error', (err) => {
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    });
  }

  call(req: Extract<LoadRequest, { op: 'startSink' }>): Promise<{ port: number }>;
  call(req: Extract<LoadRequest, { op: 'waitSink' }>): Promise<{ at: number | null; count: number; duplicates: number }>;
  call(req: Extract<LoadRequest, { op: 'httpSends' | 'smtpSends' }>): Promise<RunResult>;
  call(req: Extract<LoadRequest, { op: 'close' }>): Promise<object>;
  call(req: LoadRequest): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, req });
    });
  }

  private closed: Promise<void> | null = null;

  /** Closes the clients' connections and the sink, then ends the thread. Safe to call more than once. */
  close(): Promise<void> {
    this.closed ??= (async () => {
      await this.call({ op: 'close' }).catch(() => undefined);
      await this.worker.terminate();
    })();
    return this.closed;
  }
}

if (parentPort) serve();
