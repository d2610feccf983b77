/**
 * Observability through `node:diagnostics_channel`. Messages are built only when someone
 * subscribes, so an unobserved claim pays one property read.
 */
import diagnostics from 'node:diagnostics_channel'

/**
 * Published after every claim that got an answer from the database.
 *
 * @example
 * diagnostics_channel.subscribe('pg-cron-lease:claim', (m) => console.log(m.jobName, m.won))
 */
export interface ClaimMessage {
  jobName: string
  holder: string
  won: boolean
  /** The winner's claim token; `null` for a loss. */
  claimToken: string | null
  /**
   * On a win, this replica's wall clock minus the database's, in ms, estimated from the claim's
   * round trip (accurate to half of it); positive when this replica is ahead. `null` for a loss.
   */
  clockOffsetMs: number | null
}

/**
 * Published after every `renew()` and keep-alive beat that got an answer from the database.
 *
 * @example
 * diagnostics_channel.subscribe('pg-cron-lease:renew', (m) => m.renewed || alert(m.jobName))
 */
export interface RenewMessage {
  jobName: string
  holder: string
  renewed: boolean
  /** The extension asked for, in ms. */
  ms: number
}

/**
 * The context of the `pg-cron-lease:tick` tracing channel (start, end, asyncStart, asyncEnd,
 * error), one per tick that runs. On error the channel adds `error`; on success, `result`.
 *
 * @example
 * diagnostics_channel.tracingChannel('pg-cron-lease:tick').subscribe({ start(m) {}, asyncEnd(m) {}, error(m) {} })
 */
export interface TickMessage {
  jobName: string
  holder: string
  claimToken: string | null
  leaseMs: number
}

/**
 * The channel names, which are part of the public contract.
 *
 * A subscriber that throws does not stop the claim, renew or tick that published, but Node
 * re-throws its error on the next tick as an uncaught exception (the rule of
 * `node:diagnostics_channel`), which ends the process unless something handles it: catch errors
 * inside the subscriber.
 */
export const CHANNELS = Object.freeze({
  claim: 'pg-cron-lease:claim',
  renew: 'pg-cron-lease:renew',
  tick: 'pg-cron-lease:tick',
} as const)

const claimChannel = diagnostics.channel(CHANNELS.claim)
const renewChannel = diagnostics.channel(CHANNELS.renew)
const tickChannel = diagnostics.tracingChannel<unknown, TickMessage & object>(CHANNELS.tick)

export function publishClaim(message: () => ClaimMessage): void {
  if (claimChannel.hasSubscribers) claimChannel.publish(message())
}

export function publishRenew(message: () => RenewMessage): void {
  if (renewChannel.hasSubscribers) renewChannel.publish(message())
}

/**
 * Runs the tick inside the tracing channel when it has subscribers, and bare otherwise. Either
 * way the tick starts synchronously and a synchronous throw becomes a rejection, so the two paths
 * differ only in what subscribers see.
 */
export function traceTick<T>(run: () => T | Promise<T>, message: () => TickMessage): Promise<T> {
  if (!tickChannel.hasSubscribers) return new Promise<T>((resolve) => resolve(run()))
  return tickChannel.tracePromise(async () => run(), message())
}
