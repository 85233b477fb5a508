/**
 * A thread's event-loop delays, for the benches' timelines: a 10 ms timer that fires 20 ms or more late is
 * recorded as [when it was due, ms late]. Imports nothing, so a load thread (push-peer.ts) can use it too.
 */
export function watchTimerLag(lags: [number, number][]): NodeJS.Timeout {
  let expected = Date.now() + 10;
  return setInterval(() => {
    const now = Date.now();
    if (now - expected >= 20) lags.push([expected, now - expected]);
    expected = now + 10;
  }, 10);
}
