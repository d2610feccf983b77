/**
 * The OpenTelemetry SDK as an application sets it up, for the tests of pg-cron-lease/otel: global
 * tracer and meter providers with in-memory exporters, and the real `pg` instrumentation. Imported
 * first by each test file: the instrumentation patches `pg` only when `pg` is loaded after it.
 */
import { metrics } from '@opentelemetry/api'
import { registerInstrumentations } from '@opentelemetry/instrumentation'
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg'
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node'

export const spans = new InMemorySpanExporter()
export const tracerProvider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] })
tracerProvider.register()

export const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
// Read on demand (forceFlush), never on a timer of its own during a test.
export const metricReader = new PeriodicExportingMetricReader({
  exporter: metricExporter,
  exportIntervalMillis: 3_600_000,
})
export const meterProvider = new MeterProvider({ readers: [metricReader] })
metrics.setGlobalMeterProvider(meterProvider)

registerInstrumentations({ instrumentations: [new PgInstrumentation()], tracerProvider })
