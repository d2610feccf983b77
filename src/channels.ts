/** `node:diagnostics_channel`; messages are built only when someone subscribes. */
import diagnostics from 'node:diagnostics_channel'
import type { Settled } from './outcome.js'
import type { Ticket } from './ticket.js'

/** On `pg-cron-lease:claim`, after every claim the database answered. */
export interface ClaimMessage {
  jobName: string
  holder: string
  won: boolean
  /** The winner's claim token; `null` for a loss. */
  claimToken: string | null
  /** On a win, this replica's clock minus the database's in ms (± half the round trip); else `null`. */
  clockOffsetMs: number | null
}

/** On `pg-cron-lease:renew`, after every `renew()` and keep-alive beat the database answered. */
export interface RenewMessage extends Omit<RunMessage, 'claimToken'> {
  renewed: boolean
  ms: number
}

/** What every message of one run carries. */
export interface RunMessage {
  /** The same object in every message of this run, to key a `WeakMap` on; read nothing from it. */
  run: object
  jobName: string
  holder: string
  claimToken: string | null
}

/** The context of the `pg-cron-lease:tick` tracing channel, one per tick that runs. */
export interface TickMessage extends RunMessage {
  leaseMs: number
  /** A `start` subscriber sets it to run the tick in a context no `bindStore` reaches; a second wraps the first's. */
  within?: <R>(tick: () => R) => R
}

/** On `pg-cron-lease:run:start`, once a claim is won, before its tick runs; a {@link RunEndMessage} ends each run. */
export interface RunStartMessage extends RunMessage {
  leaseMs: number
  /** The occurrence the claim won, `null` when the call named none. */
  occurrence: Date | null
  /** Occurrences of the job that fell due unclaimed before this one, counted by this claim. */
  missed: number
  /** Won by a catch-up (`catchUp`, or the `catchUp` option of `leasedTick`, `@Leased()` or the coordinator). */
  catchUp: boolean
}

/** On `pg-cron-lease:run:end`, the run's last message: once its outcome is recorded (or `record` is false). */
export interface RunEndMessage extends RunMessage {
  /** `unknown` when the scheduler cannot say (an unwatched node-cron task). */
  outcome: 'ok' | 'error' | 'unknown'
  /** What the tick threw, `undefined` unless `outcome` is `error`. */
  error: unknown
  /** How long the tick took in ms, as recorded in the table. */
  durationMs: number
}

/** On `pg-cron-lease:lost`, once per run, when its tick learns its lease was lost; `ctx.signal` aborts. */
export interface LostLeaseMessage extends RunMessage {
  /** Why, in words: `it was released (…)`, `another claim replaced it`, `it expired`, … */
  reason: string
}

/** On `pg-cron-lease:drain-abort`, when a shutdown aborts a run at its timeout: the run ends with this error. */
export interface DrainAbortMessage extends RunMessage {
  reason: Error
}

/** The channel names. Node rethrows a subscriber's throw as an uncaught exception: catch inside it. */
export const CHANNELS = Object.freeze({
  claim: 'pg-cron-lease:claim',
  renew: 'pg-cron-lease:renew',
  tick: 'pg-cron-lease:tick',
  runStart: 'pg-cron-lease:run:start',
  runEnd: 'pg-cron-lease:run:end',
  lost: 'pg-cron-lease:lost',
  drainAbort: 'pg-cron-lease:drain-abort',
} as const)

function publisher<A extends unknown[], M>(name: string, message: (...args: A) => M): (...args: A) => void {
  const channel = diagnostics.channel(name)
  return (...args) => {
    if (channel.hasSubscribers) channel.publish(message(...args))
  }
}

function runOf({ run, config, claimToken }: Ticket): RunMessage {
  return { run, jobName: config.jobName, holder: config.holder, claimToken }
}

export const publishClaim = publisher(CHANNELS.claim, (message: () => ClaimMessage) => message())
export const publishRenew = publisher(CHANNELS.renew, (message: () => RenewMessage) => message())
export const publishRunStart = publisher(CHANNELS.runStart, (ticket: Ticket): RunStartMessage => {
  const { occurrence, missed, catchUp } = ticket
  return { ...runOf(ticket), leaseMs: ticket.config.leaseMs, occurrence, missed, catchUp }
})

function runEnd(ticket: Ticket, settled: Settled, durationMs: number): RunEndMessage {
  const error = settled.outcome === 'error' ? settled.error : undefined
  return { ...runOf(ticket), outcome: settled.outcome, error, durationMs }
}
export const publishRunEnd = publisher(CHANNELS.runEnd, runEnd)

const stopped = <R>(name: string) =>
  publisher(name, (ticket: Ticket, reason: R): RunMessage & { reason: R } => ({ ...runOf(ticket), reason }))
export const publishLost = stopped<LostLeaseMessage['reason']>(CHANNELS.lost)
export const publishDrainAbort = stopped<DrainAbortMessage['reason']>(CHANNELS.drainAbort)

const tickChannel = diagnostics.tracingChannel<unknown, TickMessage & object>(CHANNELS.tick)

// Either way the tick starts synchronously and a synchronous throw becomes a rejection.
export function traceTick<T>(run: () => T | Promise<T>, message: () => TickMessage): Promise<T> {
  if (!tickChannel.hasSubscribers) return new Promise<T>((resolve) => resolve(run()))
  const context = message()
  // `start` subscribers run before this function is called, so `within` is set by then.
  return tickChannel.tracePromise(async () => (context.within === undefined ? run() : context.within(run)), context)
}
