import { publishClaim, publishRunEnd, publishRunStart, traceTick } from './channels.js'
import { checkClock, clockOffset, monotonicMs } from './clock.js'
import { checkKeepAliveHandle, openContext } from './context.js'
import { draining, type InFlight, openRun, type RunGroup, untilStopped } from './drain.js'
import { escapeControls } from './escape.js'
import { debug, migrateCommand, warn, warnShape } from './log.js'
import { type Compiled, compileCall, type EntryPoint } from './options.js'
import { recordOutcome, type Settled } from './outcome.js'
import { type IntervalLease, MAX_INTERVAL_MS } from './presets.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { DEFAULT_TABLE, type Shape } from './sql.js'
import { clearWarning, firstWarning, knowledgeOf, statementsOf, type TableKnowledge } from './state.js'
import { readFacts, shapeOf } from './table-facts.js'
import { type ClaimConfig, firstRow, type RunConfig, type Slot, slotOf, type Ticket, wonTicket } from './ticket.js'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkFunction, checkJobName, checkMs, checkQueryable, fail } from './validate.js'

/**
 * Runs `runTick` on exactly one replica per occurrence; the others resolve `{ ran: false }` without
 * writing. A missed occurrence beats a duplicate: a claim error rejects and nothing runs, a tick
 * that throws rejects and keeps its lease. The lease is never released (see {@link LEASE}). Once
 * {@link drainLeases} was called, it resolves `{ ran: false }` with no query.
 *
 * @example
 * cron.schedule('0 * * * *', (run) =>
 *   withCronLease(pool, 'billing:hourly', LEASE.HOURLY, chargeCustomers, { occurrence: run.date }),
 * )
 */
export function withCronLease<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeaseOptions,
): Promise<LeaseOutcome<T>> {
  // A bad argument rejects: the call never throws.
  try {
    const config = runConfig<T>('withCronLease', db, jobName, leaseMs, runTick, opts)
    return runLease(config, config.slot)
  } catch (error) {
    return Promise.reject(error)
  }
}

/** The arguments of `withCronLease`, `leasedTick` and `catchUp`, checked in declared order. */
export function runConfig<T>(
  entry: EntryPoint,
  db: unknown,
  jobName: unknown,
  leaseMs: unknown,
  runTick: unknown,
  opts: unknown,
): RunConfig<T> & { options: Compiled; slot: Slot | null; nextOccurrence: number | null } {
  const queryable = checkQueryable(db)
  const job = checkJobName(jobName)
  const lease = checkLease(leaseMs)
  const tick = checkFunction<(ctx: LeaseContext) => Promise<T> | T>(runTick, 'runTick')
  const { options, occurrence, nextOccurrence } = compileCall(entry, opts, lease.leaseMs)
  const everyMs = options.everyMs ?? lease.everyMs
  return {
    ...options,
    db: queryable,
    jobName: job,
    leaseMs: lease.leaseMs,
    runTick: tick,
    everyMs,
    options,
    slot: slotOf(occurrence, nextOccurrence, everyMs),
    nextOccurrence,
  }
}

// `forInterval`'s result is read once: it may be a Proxy.
function checkLease(value: unknown): { leaseMs: number; everyMs: number | undefined } {
  if (typeof value !== 'object' || value === null) return { leaseMs: checkMs(value, 'leaseMs'), everyMs: undefined }
  const rule = 'a number of milliseconds, or what forInterval() returns'
  let leaseMs: unknown
  let everyMs: unknown
  try {
    ;({ leaseMs, everyMs } = value as IntervalLease)
  } catch {
    return fail('leaseMs', rule, value)
  }
  if (typeof leaseMs !== 'number' || typeof everyMs !== 'number') fail('leaseMs', rule, value)
  return { leaseMs: checkMs(leaseMs, 'leaseMs.leaseMs'), everyMs: checkMs(everyMs, 'leaseMs.everyMs', MAX_INTERVAL_MS) }
}

/** The one run path: claim, run, record; plain promise steps, as each `async` layer costs microtask turns per job. */
export function runLease<T>(
  config: RunConfig<T>,
  slot: Slot | null = null,
  group?: RunGroup,
): Promise<LeaseOutcome<T>> {
  return runTracked(config, () => claim(config, slot), group)
}

/** A run in flight for drainLeases from its claim (`claimed`) to its record; once draining, not run at all. */
export function runTracked<T>(
  config: RunConfig<T>,
  claimed: () => Promise<Ticket | null>,
  group?: RunGroup,
): Promise<LeaseOutcome<T>> {
  const run = openRun(config.jobName, group)
  if (run === null) return Promise.resolve(NOT_RUN)
  let ticket: Promise<Ticket | null>
  try {
    ticket = claimed()
  } catch (error) {
    run.end()
    return Promise.reject(error)
  }
  // A won run ends once runClaimed has recorded it; a lost one at once, with no promise more.
  return ticket.then(
    (won) => {
      if (won !== null) return runClaimed(config, won, run).finally(() => run.end())
      run.end()
      return NOT_RUN
    },
    (error: unknown) => {
      run.end()
      throw error
    },
  )
}

/** What a claim or catch-up that did not win resolves to. */
export const NOT_RUN: LeaseOutcome<never> = Object.freeze({ ran: false, result: null })

/** Runs the tick of a won claim (or catch-up) and records how it ended. */
export async function runClaimed<T>(config: RunConfig<T>, ticket: Ticket, run?: InFlight): Promise<LeaseOutcome<T>> {
  const { jobName, leaseMs, holder, keepAlive } = config
  const { claimToken } = ticket
  if (keepAlive && claimToken === null) {
    throw new TypeError(
      `pg-cron-lease: keepAlive cannot fence the lease for '${jobName}': the claim's result had no row to read ` +
        'its claim token from; the lease is held until it expires and the tick did not run',
    )
  }
  const { ctx, close, stop } = openContext(ticket, keepAlive)
  publishRunStart(ticket)
  const startedAt = monotonicMs()
  let settled: Settled = { outcome: 'ok' }
  try {
    const result = await traceTick(
      // Stopped by a shutdown, the run is over: it rejects, and is recorded, with the shutdown's reason.
      () => (run === undefined ? config.runTick(ctx) : untilStopped(run, stop, () => config.runTick(ctx))),
      () => ({ run: ticket, jobName, holder, claimToken, leaseMs }),
    )
    return { ran: true, result }
  } catch (error) {
    settled = { outcome: 'error', error }
    throw error
  } finally {
    run?.onStop(undefined)
    const sent = close()
    const durationMs = monotonicMs() - startedAt
    if (config.record) {
      const everyMs = config.everyMs ?? ticket.intervalMs ?? undefined
      await recordOutcome(ticket, durationMs, everyMs, settled, sent)
    }
    publishRunEnd(ticket, settled, durationMs)
  }
}

/** The one claim path (runLease, leaseCoordinator): the won ticket, or null. */
export function claim(config: ClaimConfig, slot: Slot | null = null): Promise<Ticket | null> {
  if (slot !== null) checkGap(config, slot)
  const shape = shapeOf(config)
  return shape instanceof Promise ? shape.then((known) => send(config, slot, known)) : send(config, slot, shape)
}

/** The current shape's claim parameters (see claimSql). */
export function claimParams(config: ClaimConfig, slot: Slot | null, nowMs: number): unknown[] {
  const { jobName, leaseMs, holder } = config
  return [jobName, leaseMs, holder, slot?.occurrence ?? null, toleranceOf(config), ...scheduleParams(slot, nowMs)]
}

/** Whether a claimant writes its runs to the table's history: the table has one, and neither `record` nor `history` is false. */
export function keepsHistory(config: ClaimConfig, known: TableKnowledge): boolean {
  return known.history && config.record !== false && config.history !== false
}

/** The claim's and the catch-up's last three: the next occurrence as ms from now and as itself, the interval. */
export function scheduleParams(slot: Slot | null, nowMs: number): [number | null, number | null, number | null] {
  const next = slot?.nextOccurrence ?? null
  return [next === null ? null : next - nowMs, next, slot?.intervalMs ?? null]
}

// On the current shape the read-only probe goes first: most claims lose, and a loser it stops
// sends nothing more. The claim itself still decides: a probe that found the lease free can lose.
// After a claim the probe did not stop (a win, or a dead heat: ticks that fire together all probe
// before the winner commits), the next UNPROBED_CLAIMS go without it (docs/performance.md).
function send(config: ClaimConfig, slot: Slot | null, known: Shape | undefined): Promise<Ticket | null> {
  const { db, table, jobName, logger, prepare } = config
  checkKeepAliveHandle(config)
  // A table not known to exist gets the original statement, whose refusal names the table.
  const shape = known ?? 'original'
  if (known === 'original') warnShape(table, logger)
  if (shape === 'original') return sendClaim(config, slot, shape, false)
  const knowledge = knowledgeOf(db, table)
  // Counted as sent: a burst of calls at once skips the probe three times, not once each.
  if (knowledge.unprobed > 0) {
    knowledge.unprobed--
    return sendClaim(config, slot, shape, false)
  }
  return runStatement(db, statementsOf(table, shape).probe, [jobName, slot?.occurrence ?? null], prepare).then(
    (probed) =>
      readResult(probed, jobName, 'claimed').matched ? lost(config, slot, shape) : sendClaim(config, slot, shape, true),
    (error: unknown) => Promise.reject(claimError(config, error)),
  )
}

const UNPROBED_CLAIMS = 3

function sendClaim(config: ClaimConfig, slot: Slot | null, shape: Shape, probed: boolean): Promise<Ticket | null> {
  // A run that began before drainLeases sends no claim after it.
  if (draining()) return Promise.resolve(null)
  const { db, table, jobName, leaseMs, holder, prepare } = config
  const sentAt = monotonicMs()
  const sentWallMs = Date.now()
  const known = knowledgeOf(db, table)
  const params = shape === 'current' ? claimParams(config, slot, sentWallMs) : [jobName, leaseMs, holder]
  return runStatement(db, statementsOf(table, shape, keepsHistory(config, known)).claim, params, prepare).then(
    (result): Ticket | null | Promise<null> => {
      const { matched: won, claimToken } = readResult(result, jobName, 'claimed')
      if (won || probed) known.unprobed = UNPROBED_CLAIMS
      if (!won) return lost(config, slot, shape)
      const receivedWallMs = Date.now()
      const clockOffsetMs = claimToken !== null ? clockOffset(claimToken, sentWallMs, receivedWallMs) : null
      publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs }))
      if (clockOffsetMs !== null) {
        known.clock = { offsetMs: clockOffsetMs, at: monotonicMs() }
        checkClock(config, clockOffsetMs, receivedWallMs - sentWallMs)
      }
      if (shape === 'current' && slot?.occurrence != null) clearWarning(table, `early:${jobName}`)
      return wonTicket(config, claimToken, sentAt, shape, firstRow(result), slot, false)
    },
    (error: unknown) => Promise.reject(claimError(config, error)),
  )
}

function lost(config: ClaimConfig, slot: Slot | null, shape: Shape): null | Promise<null> {
  const { jobName, holder, logger } = config
  const keyed = shape === 'current' && slot?.occurrence != null
  publishClaim(() => ({ jobName, holder, won: false, claimToken: null, clockOffsetMs: null }))
  debug(logger, () =>
    keyed
      ? `pg-cron-lease: '${jobName}' skipped ${new Date(slot.occurrence as number).toISOString()}: lease held, that occurrence or a later one already claimed, or it is too early`
      : `pg-cron-lease: '${jobName}' skipped: lease held by another replica`,
  )
  return keyed ? checkEarly(config, slot.occurrence as number) : null
}

/** A failed claim's error: a table changed under it is read again next claim, never guessed; a missing one is named. */
export function claimError({ db, table }: ClaimConfig, error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code
  const known = knowledgeOf(db, table)
  // The probe goes first again: a handle that keeps failing (a standby) still loses quietly to a held lease.
  known.unprobed = 0
  if (code === '42703') known.shape = undefined
  const message = (error as { message?: unknown } | null)?.message
  // A 42P01 about another relation (a trigger's) is not this.
  if (code !== '42P01' || typeof message !== 'string' || !message.includes(`"${table}"`)) return error
  return tableMissing(table, error)
}

// How far ahead of the database clock an occurrence may lie: the option, else 10% of the lease.
function toleranceOf(config: ClaimConfig): number {
  return config.clockToleranceMs ?? Math.floor(config.leaseMs / 10)
}

// A lease not shorter than the gap silently skips every other occurrence: one warning per job.
function checkGap({ table, jobName, leaseMs, logger }: ClaimConfig, { intervalMs }: Slot): void {
  if (intervalMs === null || leaseMs < intervalMs || !firstWarning(table, `gap:${jobName}`)) return
  warn(
    logger,
    `pg-cron-lease: the ${leaseMs} ms lease of '${escapeControls(jobName)}' is not shorter than the ${intervalMs} ms ` +
      'between its occurrences: each claim still holds the lease when the next occurrence fires, so that one is ' +
      `skipped; set a lease shorter than the gap (forInterval(${intervalMs}), or as long as one run may take)`,
  )
}

/** The error for a lease table that does not exist, with what to run; `code` 42P01 as the driver's. */
export function tableMissing(table: string, cause?: unknown): Error {
  const message =
    `pg-cron-lease: the lease table ${table} does not exist (or this role cannot see it): create it with ` +
    `\`${migrateCommand(table)}\`, or run createTableSql(${table === DEFAULT_TABLE ? '' : JSON.stringify(table)}) ` +
    'in a migration; the tick did not run'
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code: '42P01' })
}

// How old the clock-offset estimate may get before a loser reads it again.
const CLOCK_CHECK_EVERY_MS = 60_000

// Only a too-early loss needs saying (this replica's clock runs fast and never runs the job); the
// offset is refreshed by won claims, else by a facts read at most once a minute per table.
function checkEarly(config: ClaimConfig, occurrence: number): null | Promise<null> {
  const known = knowledgeOf(config.db, config.table)
  const fresh = known.clock !== undefined && monotonicMs() - known.clock.at < CLOCK_CHECK_EVERY_MS
  const judge = () => judgeEarly(config, occurrence, known.clock)
  // A failed read leaves nothing to judge by.
  return fresh ? judge() : readFacts(config, known).then(judge, () => null)
}

function judgeEarly(config: ClaimConfig, occurrence: number, clock: TableKnowledge['clock']): null {
  const { table, jobName, logger } = config
  if (clock === undefined) return null
  const aheadMs = occurrence - (Date.now() - clock.offsetMs)
  const tolerance = toleranceOf(config)
  if (!(aheadMs > tolerance)) clearWarning(table, `early:${jobName}`)
  else if (firstWarning(table, `early:${jobName}`))
    warn(
      logger,
      `pg-cron-lease: '${escapeControls(jobName)}' did not run its occurrence ${new Date(occurrence).toISOString()}: it ` +
        `lies about ${Math.round(aheadMs)} ms ahead of the database clock, more than the ${tolerance} ms tolerance; this ` +
        "replica's clock runs fast, and it runs no occurrence of this job until that is fixed: fix its time sync (NTP)",
    )
  return null
}
