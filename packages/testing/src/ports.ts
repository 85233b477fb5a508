/**
 * Ports for the servers a test or a bench starts as its own process. Kept free of other imports so that the
 * benches, which do not run under vitest, can use it too.
 */
import net from 'node:net';

/** Ports this process has handed out: never the same one twice. */
const handedOut = new Set<number>();

/**
 * A TCP port on 127.0.0.1 that was free a moment ago. Picked at random below the kernel's ephemeral range
 * (net.ipv4.ip_local_port_range, 32768-60999 by default): a port bound to 0 and released comes from that range,
 * where any parallel test's `listen(0)` or outgoing connection (HTTP, PostgreSQL, Redis) could take it before
 * the child binds it (EADDRINUSE). Below the range only callers of this function pick ports: never the same one
 * twice in a process, and the bind checks that nothing holds it yet; two processes (vitest's workers) picking the
 * same port within the moment between the check and a child's bind is left to chance (1 in 12,000 a pick).
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (handedOut.has(port)) continue;
    const free = await new Promise<boolean>((resolve, reject) => {
      const s = net.createServer();
      s.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(false) : reject(err)));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (free) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error('no free port found in 20000-31999 on 127.0.0.1');
}

/** Resolves once something accepts connections on 127.0.0.1:port; throws after ms. */
export async function waitForPort(port: number, ms: number): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect({ host: '127.0.0.1', port });
      c.once('connect', () => (c.destroy(), resolve(true)));
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > end) throw new Error(`nothing answers on 127.0.0.1:${port} after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
