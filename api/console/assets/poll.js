// Polling within the console's budget: at most one call per period, never two at once, none
// while the tab is hidden (watching must stay cheap for the pipeline: issue 19, point 6).

/**
 * Run `task` now and then every `periodMs` (measured from the start of the previous run, and
 * never before it finished). `task` reports its own errors; a rejection does not stop polling.
 * Returns {stop(), now()}: stop ends it; now runs the task at once (after the one in flight).
 */
export function every(periodMs, task) {
  let stopped = false;
  let timer = null;
  let running = null;

  async function tick() {
    timer = null;
    if (stopped) return;
    const started = performance.now();
    if (!document.hidden) {
      running = Promise.resolve().then(task).catch(() => {});
      await running;
      running = null;
    }
    if (!stopped) timer = setTimeout(tick, Math.max(0, periodMs - (performance.now() - started)));
  }

  function visible() {
    if (!document.hidden && timer !== null && !running) {
      clearTimeout(timer);
      tick();
    }
  }

  document.addEventListener("visibilitychange", visible);
  tick();
  return {
    stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      document.removeEventListener("visibilitychange", visible);
    },
    async now() {
      if (stopped) return;
      if (running) await running;
      if (timer !== null) clearTimeout(timer);
      await tick();
    },
  };
}
