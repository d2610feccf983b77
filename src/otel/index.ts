/**
 * `pg-cron-lease/otel`: a span per run and the metrics operators chart, made from the library's
 * diagnostics channels. Nothing of the core imports this file, so the core never loads
 * `@opentelemetry/api`.
 */
import diagnostics from 'node:diagnostics_channel'
import {
  type Attributes,
  context,
  type MeterProvider,
  metrics,
  type ObservableResult,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TracerProvider,
  trace,
} from '@opentelemetry/api'
import {
  CHANNELS,
  type ClaimMessage,
  type DrainAbortMessage,
  type LostLeaseMessage,
  type RenewMessage,
  type RunEndMessage,
  type RunStartMessage,
  type TickMessage,
} from '../channels.js'
import { fail } from '../validate.js'

/**
 * Options of {@link instrumentCronLeases}; each left out is the global one (`trace` / `metrics`).
 *
 * @example
 * const opts: CronLeaseInstrumentationOptions = { tracerProvider: sdk.tracerProvider }
 */
export interface CronLeaseInstrumentationOptions {
  tracerProvider?: TracerProvider
  meterProvider?: MeterProvider
}

/** The attribute names, in one namespace (docs/opentelemetry.md says what each means). */
export const ATTRIBUTES = Object.freeze({
  job: 'pg_cron_lease.job',
  occurrence: 'pg_cron_lease.occurrence',
  holder: 'pg_cron_lease.holder',
  claimToken: 'pg_cron_lease.claim_token',
  missed: 'pg_cron_lease.missed',
  catchUp: 'pg_cron_lease.catch_up',
  leaseMs: 'pg_cron_lease.lease_ms',
  outcome: 'pg_cron_lease.outcome',
  claimResult: 'pg_cron_lease.claim.result',
  renewed: 'pg_cron_lease.renewed',
  renewMs: 'pg_cron_lease.renew_ms',
  reason: 'pg_cron_lease.reason',
} as const)

// Durations of cron runs reach from milliseconds to hours; the SDK's default buckets are for ms.
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]

/** One subscribed set of instruments, shared by every call with the same two providers. */
interface Instance {
  readonly tracerProvider: TracerProvider
  readonly meterProvider: MeterProvider
  users: number
  /** The spans of the runs in flight, by the run's identity object. */
  readonly live: Map<object, { span: Span; jobName: string; occurrence: number | null }>
  stop(): void
}

// On globalThis, so the ESM and CJS builds loaded side by side still share one list and never count twice.
const REGISTRY = Symbol.for('pg-cron-lease.otel')
function instances(): Instance[] {
  const holder = globalThis as { [REGISTRY]?: Instance[] }
  holder[REGISTRY] ??= []
  return holder[REGISTRY]
}

/**
 * Subscribes to the library's diagnostics channels: each run the winner makes becomes a span (the
 * tick's own work nested in it) and every claim, run, missed occurrence and lost lease is counted.
 * Returns the function that unsubscribes. A second call with the same providers shares the first's
 * subscription, so nothing is counted twice; it stops when the last of them unsubscribes. Call it
 * after the SDK has registered its global providers.
 *
 * @example
 * const sdk = new NodeSDK({ instrumentations: [new PgInstrumentation()] })
 * sdk.start()
 * const stop = instrumentCronLeases()
 * // at shutdown: stop(); await sdk.shutdown()
 */
export function instrumentCronLeases(opts?: CronLeaseInstrumentationOptions): () => void {
  const { tracerProvider, meterProvider } = checkOptions(opts)
  const list = instances()
  let instance = list.find((i) => i.tracerProvider === tracerProvider && i.meterProvider === meterProvider)
  if (instance === undefined) {
    instance = subscribe(tracerProvider, meterProvider)
    list.push(instance)
  }
  instance.users++
  const mine = instance
  let done = false
  return () => {
    if (done) return
    done = true
    if (--mine.users > 0) return
    mine.stop()
    list.splice(list.indexOf(mine), 1)
  }
}

function checkOptions(opts: unknown): { tracerProvider: TracerProvider; meterProvider: MeterProvider } {
  if (opts === undefined)
    return { tracerProvider: trace.getTracerProvider(), meterProvider: metrics.getMeterProvider() }
  if (typeof opts !== 'object' || opts === null) fail('opts', 'an object or undefined', opts)
  for (const key of Object.keys(opts)) {
    if (key !== 'tracerProvider' && key !== 'meterProvider') {
      fail(`opts.${key}`, 'left out: the options are tracerProvider and meterProvider', (opts as never)[key])
    }
  }
  const { tracerProvider, meterProvider } = opts as CronLeaseInstrumentationOptions
  if (tracerProvider !== undefined && typeof tracerProvider?.getTracer !== 'function') {
    fail('opts.tracerProvider', 'a TracerProvider (with getTracer) or undefined', tracerProvider)
  }
  if (meterProvider !== undefined && typeof meterProvider?.getMeter !== 'function') {
    fail('opts.meterProvider', 'a MeterProvider (with getMeter) or undefined', meterProvider)
  }
  return {
    tracerProvider: tracerProvider ?? trace.getTracerProvider(),
    meterProvider: meterProvider ?? metrics.getMeterProvider(),
  }
}

function subscribe(tracerProvider: TracerProvider, meterProvider: MeterProvider): Instance {
  const tracer = tracerProvider.getTracer('pg-cron-lease')
  const meter = meterProvider.getMeter('pg-cron-lease')
  // Observed at collection from counts kept here: a counter's add() costs a losing claim about 5 µs
  // (it hashes the attributes each call), more than the 5% of its CPU it may take; an increment, nothing.
  const claims = meter.createObservableCounter('pg_cron_lease.claims', {
    unit: '{claim}',
    description: 'Claims the database answered, by job and result (won or lost); catch-up claims included.',
  })
  const runs = meter.createCounter('pg_cron_lease.runs', {
    unit: '{run}',
    description: 'Runs that ended, by job and outcome (ok, error or unknown).',
  })
  const duration = meter.createHistogram('pg_cron_lease.run.duration', {
    unit: 's',
    description: 'How long each run took, from its tick call to its settling, by job and outcome.',
    advice: { explicitBucketBoundaries: DURATION_BUCKETS },
  })
  const missedOccurrences = meter.createCounter('pg_cron_lease.missed_occurrences', {
    unit: '{occurrence}',
    description: 'Occurrences that fell due with no claim, counted by the claim that won after them.',
  })
  const lostLeases = meter.createCounter('pg_cron_lease.lost_leases', {
    unit: '{lease}',
    description: 'Runs whose tick learned that its lease was lost (released, paused, expired or replaced).',
  })
  const live: Instance['live'] = new Map()
  // Each job's claims so far; never trimmed, as a cumulative count must not go back.
  const claimCounts = new Map<string, { won: number; lost: number }>()
  const observeClaims = (result: ObservableResult) => {
    for (const [jobName, { won, lost }] of claimCounts) {
      if (won > 0) result.observe(won, { [ATTRIBUTES.job]: jobName, [ATTRIBUTES.claimResult]: 'won' })
      if (lost > 0) result.observe(lost, { [ATTRIBUTES.job]: jobName, [ATTRIBUTES.claimResult]: 'lost' })
    }
  }
  claims.addCallback(observeClaims)

  const onClaim = (message: unknown) => {
    const { jobName, won } = message as ClaimMessage
    let counts = claimCounts.get(jobName)
    if (counts === undefined) {
      counts = { won: 0, lost: 0 }
      claimCounts.set(jobName, counts)
    }
    if (won) counts.won++
    else counts.lost++
  }
  const onRunStart = (message: unknown) => {
    const { run, jobName, holder, claimToken, leaseMs, occurrence, missed, catchUp } = message as RunStartMessage
    const attributes: Attributes = {
      [ATTRIBUTES.job]: jobName,
      [ATTRIBUTES.holder]: holder,
      [ATTRIBUTES.missed]: missed,
      [ATTRIBUTES.catchUp]: catchUp,
      [ATTRIBUTES.leaseMs]: leaseMs,
    }
    if (claimToken !== null) attributes[ATTRIBUTES.claimToken] = claimToken
    if (occurrence !== null) attributes[ATTRIBUTES.occurrence] = occurrence.toISOString()
    const span = tracer.startSpan(`run ${jobName}`, { kind: SpanKind.INTERNAL, attributes })
    live.set(run, { span, jobName, occurrence: occurrence?.getTime() ?? null })
    // Added even when 0, so each job's series exists from its first run, as in the Prometheus text.
    missedOccurrences.add(missed, { [ATTRIBUTES.job]: jobName })
  }
  // Runs the tick inside the run's span; wraps a `within` another subscriber set before this one.
  const onTickStart = (message: unknown) => {
    const tick = message as TickMessage
    const span = live.get(tick.run)?.span
    if (span === undefined) return
    const outer = tick.within
    const active = trace.setSpan(context.active(), span)
    tick.within = (fn) => context.with(active, outer === undefined ? fn : () => outer(fn))
  }
  const onRenew = (message: unknown) => {
    const { run, renewed, ms } = message as RenewMessage
    live.get(run)?.span.addEvent('pg_cron_lease.renew', { [ATTRIBUTES.renewed]: renewed, [ATTRIBUTES.renewMs]: ms })
  }
  const onLost = (message: unknown) => {
    const { run, jobName, reason } = message as LostLeaseMessage
    lostLeases.add(1, { [ATTRIBUTES.job]: jobName })
    live.get(run)?.span.addEvent('pg_cron_lease.lease_lost', { [ATTRIBUTES.reason]: reason })
  }
  const onDrainAbort = (message: unknown) => {
    const { run, reason } = message as DrainAbortMessage
    live.get(run)?.span.addEvent('pg_cron_lease.drain_abort', { [ATTRIBUTES.reason]: reason.message })
  }
  const onRunEnd = (message: unknown) => {
    const { run, jobName, outcome, error, durationMs } = message as RunEndMessage
    const attributes = { [ATTRIBUTES.job]: jobName, [ATTRIBUTES.outcome]: outcome }
    runs.add(1, attributes)
    duration.record(durationMs / 1000, attributes)
    const span = live.get(run)?.span
    if (span === undefined) return
    live.delete(run)
    span.setAttribute(ATTRIBUTES.outcome, outcome)
    if (outcome === 'error') endFailed(span, error)
    span.end()
  }

  const plain: [string, (message: unknown) => void][] = [
    [CHANNELS.claim, onClaim],
    [CHANNELS.runStart, onRunStart],
    [CHANNELS.renew, onRenew],
    [CHANNELS.lost, onLost],
    [CHANNELS.drainAbort, onDrainAbort],
    [CHANNELS.runEnd, onRunEnd],
  ]
  const tickStart = diagnostics.tracingChannel(CHANNELS.tick).start
  for (const [name, handler] of plain) diagnostics.subscribe(name, handler)
  tickStart.subscribe(onTickStart)
  const instance: Instance = {
    tracerProvider,
    meterProvider,
    users: 0,
    live,
    stop() {
      for (const [name, handler] of plain) diagnostics.unsubscribe(name, handler)
      tickStart.unsubscribe(onTickStart)
      claims.removeCallback(observeClaims)
      // A run still going ends its span now: never exported otherwise, it would only be held in memory.
      for (const { span } of live.values()) span.end()
      live.clear()
    },
  }
  return instance
}

// Semantic conventions: the exception as an event, `error.type` its class, status ERROR with its message.
function endFailed(span: Span, error: unknown): void {
  const thrown = error instanceof Error ? error : new Error(String(error))
  span.recordException(thrown)
  span.setAttribute('error.type', thrown.name || 'Error')
  span.setStatus({ code: SpanStatusCode.ERROR, message: thrown.message })
}

/**
 * Wraps a node-cron task so it runs inside its coordinated run's span. node-cron calls the task
 * between the coordinator's `shouldRun` and `onComplete`, outside any call of this library, so only
 * a wrapper can make the span current for it; the run is found by the task's name and slot.
 * Without a live instrumentation (or a coordinated run) it calls the task as it is.
 *
 * @example
 * cron.schedule('* * * * *', traceNodeCronTask(sendReport), { name: 'report', distributed: true, runCoordinator })
 */
export function traceNodeCronTask<C, R>(task: (context: C) => R): (context: C) => R {
  if (typeof task !== 'function') fail('task', 'a function (the node-cron task)', task)
  return (cronContext) => {
    const { task: scheduled, date } = (cronContext ?? {}) as { task?: { name?: unknown }; date?: unknown }
    const slot = date instanceof Date ? date.getTime() : Number.NaN
    for (const { live } of instances()) {
      for (const run of live.values()) {
        if (run.jobName === scheduled?.name && run.occurrence === slot) {
          return context.with(trace.setSpan(context.active(), run.span), () => task(cronContext))
        }
      }
    }
    return task(cronContext)
  }
}
