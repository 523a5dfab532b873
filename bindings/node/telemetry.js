'use strict';
// `telemetry`: the process's telemetry, the spans and metrics of `runPlan` (of every plan run in
// this process), those `terminus orchestrate` makes, sent where the command line sends them
// (`terminus_telemetry::process` in the addon).
//
// `start()` once, early (it reads the environment then):
// - the spans (the `plan {name}` span and its events, docs/plans.md "Traces and metrics") are
//   exported over OTLP HTTP/protobuf when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, with `OTEL_EXPORTER_OTLP_HEADERS`,
//   `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME` (default `terminus`) and
//   `OTEL_RESOURCE_ATTRIBUTES` as the command line reads them; `OTEL_SDK_DISABLED=true` turns
//   them off. The endpoint is plain `http://` (a collector beside the process): the addon
//   carries no TLS, so an `https://` endpoint fails at export.
// - the metrics (`terminus_plans_total` and the rest) are recorded from then on; `metrics()`
//   gives them as Prometheus text for your own server's `/metrics`.
// `flush()` sends the spans batched so far (before a Lambda handler returns and the process is
// frozen); `shutdown()` flushes and stops the exporter, and runs by itself when the process
// exits. A process starts its telemetry once: a second `start()` does nothing and says so, one
// after `shutdown()` throws. A bad setting (an endpoint that is not a URL) throws an `Error`
// with `code` `InvalidArg` naming the exporter.

function makeTelemetry(native) {
  let exitHooked = false;

  function start() {
    const [exportingSpans, already] = native.startTelemetry();
    if (!exitHooked) {
      exitHooked = true;
      process.once('exit', () => {
        try {
          native.shutdownTelemetrySync();
        } catch (e) {
          // A collector that is down at exit is said, not thrown: the exit code stays.
          process.stderr.write(`terminus telemetry: ${e.message}\n`);
        }
      });
    }
    return { exportingSpans, already };
  }

  return {
    start,
    /** The metrics recorded since `start()`, as Prometheus text; `undefined` before. */
    metrics: () => native.metricsText() ?? undefined,
    /** Sends the spans batched so far; rejects when the collector does not take them. */
    flush: () => native.flushTelemetry(),
    /** Flushes and stops the span exporter, for good; the metrics stay readable. */
    shutdown: () => native.shutdownTelemetry(),
  };
}

module.exports = { makeTelemetry };
