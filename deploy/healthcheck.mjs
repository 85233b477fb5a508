// `boxes healthcheck` (the image's HEALTHCHECK): exit 0 when the process of this container is ready.
// A process with the HTTP server: GET /readyz on PORT (PostgreSQL and Redis answer). A process without it
// (worker, mx, push, dns: nothing listens on PORT): GET /healthz on METRICS_PORT. Anything else: exit 1.
const port = process.env.PORT || '3000';
const metricsPort = process.env.METRICS_PORT;

async function status(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
  await res.body?.cancel();
  return res.status;
}

function refused(err) {
  return err?.cause?.code === 'ECONNREFUSED';
}

let url = `http://127.0.0.1:${port}/readyz`;
try {
  let code;
  try {
    code = await status(url);
  } catch (err) {
    if (!refused(err) || !metricsPort || metricsPort === '0') throw err;
    url = `http://127.0.0.1:${metricsPort}/healthz`;
    code = await status(url);
  }
  if (code !== 200) {
    console.error(`boxes healthcheck: ${url} answered ${code}`);
    process.exit(1);
  }
  process.exit(0);
} catch (err) {
  console.error(`boxes healthcheck: ${url}: ${err?.cause?.code ?? err?.message ?? err}`);
  process.exit(1);
}
