/** `node:diagnostics_channel`; messages are built only when someone subscribes. */
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
  /** On a win, this replica's clock minus the database's in ms (± half the round trip); else `null`. */
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
  ms: number
}

/**
 * The context of the `pg-cron-lease:tick` tracing channel, one per tick that runs.
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
 * The channel names. A subscriber that throws is rethrown by Node as an uncaught exception: catch
 * inside it.
 *
 * @example
 * diagnostics_channel.subscribe(CHANNELS.claim, (m) => console.log(m))
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

// Either way the tick starts synchronously and a synchronous throw becomes a rejection.
export function traceTick<T>(run: () => T | Promise<T>, message: () => TickMessage): Promise<T> {
  if (!tickChannel.hasSubscribers) return new Promise<T>((resolve) => resolve(run()))
  return tickChannel.tracePromise(async () => run(), message())
}
