// Preloaded (NODE_OPTIONS=--require) into every node process bench:rss starts: on SIGUSR2 the process writes its
// process.memoryUsage() to BENCH_RSS_REPORT_DIR/<pid>.json, so the bench can print the heap actually used beside
// RSS (a smaller heap limit that only collects more often would not show as less memory used).
const fs = require('node:fs');
const path = require('node:path');
const dir = process.env.BENCH_RSS_REPORT_DIR;
if (dir) {
  process.on('SIGUSR2', () => {
    const m = process.memoryUsage();
    fs.writeFileSync(
      path.join(dir, `${process.pid}.json`),
      JSON.stringify({ rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers }),
    );
  });
}
