import { publishClaim, publishRunEnd, publishRunStart, traceTick } from './channels.js'
import { checkClock, clockOffset, monotonicMs } from './clock.js'
import { checkKeepAliveHandle, openContext } from './context.js'
import { draining, type InFlight, openRun, type RunGroup, untilStopped } from './drain.js'
import { escapeControls } from './escape.js'
import { knowledgeOf, type TableKnowledge } from './handle.js'
import { clearWarning, debug, firstWarning, migrateCommand, warn, warnShape } from './log.js'
import { type Compiled, compileCall, type EntryPoint } from './options.js'
import { recordOutcome, type Settled } from './outcome.js'
import { type IntervalLease, MAX_INTERVAL_MS } from './presets.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { type ClaimKind, DEFAULT_TABLE, type Shape } from './sql.js'
import { type Statement, statementsOf } from './statements.js'
import { readFacts, shapeOf } from './table-facts.js'
import {
  type ClaimConfig,
  firstRow,
  historyParams,
  type RunConfig,
  type Slot,
  slotOf,
  type Ticket,
  wonTicket,
} from './ticket.js'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkFunction, checkJobName, checkMs, checkQueryable, fail, readOrFail } from './validate.js'

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
export async function withCronLease<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeaseOptions,
): Promise<LeaseOutcome<T>> {
  // Async, so a bad argument rejects: the call never throws.
  const config = runConfig<T>('withCronLease', db, jobName, leaseMs, runTick, opts)
  return runLease(config, config.slot)
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
  const leaseMs = readOrFail(value, 'leaseMs', 'leaseMs', rule)
  const everyMs = readOrFail(value, 'everyMs', 'leaseMs', rule)
  if (typeof leaseMs !== 'number' || typeof everyMs !== 'number') fail('leaseMs', rule, value)
  return { leaseMs: checkMs(leaseMs, 'leaseMs.leaseMs'), everyMs: checkMs(everyMs, 'leaseMs.everyMs', MAX_INTERVAL_MS) }
}

/** The one run path: claim, run, record. */
export function runLease<T>(
  config: RunConfig<T>,
  slot: Slot | null = null,
  group?: RunGroup,
): Promise<LeaseOutcome<T>> {
  return runTracked(config, () => claim(config, slot), group)
}

/** A run in flight for drainLeases from its claim (`claimed`) to its record; once draining, not run at all. */
export async function runTracked<T>(
  config: RunConfig<T>,
  claimed: () => Promise<Ticket | null>,
  group?: RunGroup,
): Promise<LeaseOutcome<T>> {
  const run = openRun(config.jobName, group)
  if (run === null) return NOT_RUN
  try {
    const won = await claimed()
    return won === null ? NOT_RUN : await runClaimed(config, won, run)
  } finally {
    // A won run ends once its outcome is recorded.
    run.end()
  }
}

/** What a claim or catch-up that did not win resolves to. */
export const NOT_RUN: LeaseOutcome<never> = Object.freeze({ ran: false, result: null })

/** Runs the tick of a won claim (or catch-up) and records how it ended. */
async function runClaimed<T>(config: RunConfig<T>, ticket: Ticket, run: InFlight): Promise<LeaseOutcome<T>> {
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
      () => untilStopped(run, stop, () => config.runTick(ctx)),
      () => ({ run: ticket.run, jobName, holder, claimToken, leaseMs }),
    )
    return { ran: true, result }
  } catch (error) {
    settled = { outcome: 'error', error }
    throw error
  } finally {
    run.onStop(undefined)
    const sent = close()
    const durationMs = monotonicMs() - startedAt
    if (config.record) await recordOutcome(ticket, durationMs, settled, sent)
    publishRunEnd(ticket, settled, durationMs)
  }
}

/**
 * The one claim path (runLease, leaseCoordinator): the won ticket, or null. On the current shape
 * the read-only probe goes first: most claims lose, and a loser it stops sends nothing more. The
 * claim itself still decides: a probe that found the lease free can lose. After a claim the probe
 * did not stop (a win, or a dead heat: ticks that fire together all probe before the winner
 * commits), the next UNPROBED_CLAIMS go without it (docs/performance.md).
 */
export async function claim(config: ClaimConfig, slot: Slot | null = null): Promise<Ticket | null> {
  const { db, table, jobName, logger, prepare } = config
  if (slot !== null) checkGap(config, slot)
  const known = knowledgeOf(db, table)
  const shape = await shapeOf(config)
  checkKeepAliveHandle(config)
  if (shape === 'original') warnShape(table, logger)
  // A table not known to exist gets the original statement, whose refusal names the table.
  const kind = shape === undefined ? 'original' : claimKind(config, shape, known)
  const statements = statementsOf(table, kind)
  const send = (statement: Statement, params: unknown[]) =>
    runStatement(db, statement, params, prepare).catch((error: unknown) => Promise.reject(claimError(config, error)))
  let probed = false
  if (kind !== 'original' && known.unprobed > 0) {
    // Counted as sent: a burst of calls at once skips the probe three times, not once each.
    known.unprobed--
  } else if (kind !== 'original') {
    const held = await send(statements.probe, [jobName, slot?.occurrence ?? null])
    if (readResult(held, jobName, 'claimed').matched) return lost(config, slot, kind)
    probed = true
  }
  if (draining()) return null
  const sentAt = monotonicMs()
  const sentWallMs = Date.now()
  const result = await send(statements.claim, claimParams(config, kind, slot, sentWallMs))
  const { matched: won, claimToken } = readResult(result, jobName, 'claimed')
  if (won || probed) known.unprobed = UNPROBED_CLAIMS
  if (!won) return lost(config, slot, kind)
  const receivedWallMs = Date.now()
  const clockOffsetMs = claimToken !== null ? clockOffset(claimToken, sentWallMs, receivedWallMs) : null
  publishClaim(() => ({ jobName, holder: config.holder, won, claimToken, clockOffsetMs }))
  if (clockOffsetMs !== null) {
    known.clock = { offsetMs: clockOffsetMs, at: monotonicMs() }
    checkClock(config, clockOffsetMs, receivedWallMs - sentWallMs)
  }
  if (kind !== 'original' && slot?.occurrence != null) clearWarning(table, `early:${jobName}`)
  return wonTicket(config, claimToken, sentAt, kind, firstRow(result), slot)
}

const UNPROBED_CLAIMS = 3

/**
 * What a claimant writes besides its lease, on a table of `shape`: nothing with `record: false`;
 * its run in the lease row; and its run's row too where the table has the history and the job keeps it.
 */
export function claimKind(config: ClaimConfig, shape: Shape, known: TableKnowledge): ClaimKind {
  if (shape === 'original') return 'original'
  if (config.record === false) return 'lease'
  return known.history && config.history !== false ? 'history' : 'run'
}

/** The claim's parameters for a claimant of `kind` (see claimSql). */
function claimParams(config: ClaimConfig, kind: ClaimKind, slot: Slot | null, nowMs: number): unknown[] {
  const { jobName, leaseMs, holder } = config
  if (kind === 'original') return [jobName, leaseMs, holder]
  const params = [
    jobName,
    leaseMs,
    holder,
    slot?.occurrence ?? null,
    toleranceOf(config),
    ...scheduleParams(slot, nowMs),
  ]
  return kind === 'history' ? [...params, ...historyParams(config)] : params
}

/** The claim's and the catch-up's last three: the next occurrence as ms from now and as itself, the interval. */
export function scheduleParams(slot: Slot | null, nowMs: number): [number | null, number | null, number | null] {
  const next = slot?.nextOccurrence ?? null
  return [next === null ? null : next - nowMs, next, slot?.intervalMs ?? null]
}

async function lost(config: ClaimConfig, slot: Slot | null, kind: ClaimKind): Promise<null> {
  const { jobName, holder, logger } = config
  const keyed = kind !== 'original' && slot?.occurrence != null
  publishClaim(() => ({ jobName, holder, won: false, claimToken: null, clockOffsetMs: null }))
  debug(logger, () =>
    keyed
      ? `pg-cron-lease: '${jobName}' skipped ${new Date(slot.occurrence as number).toISOString()}: lease held, that occurrence or a later one already claimed, or it is too early`
      : `pg-cron-lease: '${jobName}' skipped: lease held by another replica`,
  )
  if (keyed) await checkEarly(config, slot.occurrence as number)
  return null
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
async function checkEarly(config: ClaimConfig, occurrence: number): Promise<void> {
  const known = knowledgeOf(config.db, config.table)
  const fresh = known.clock !== undefined && monotonicMs() - known.clock.at < CLOCK_CHECK_EVERY_MS
  // A failed read leaves nothing to judge by.
  const read =
    fresh ||
    (await readFacts(config, known).then(
      () => true,
      () => false,
    ))
  if (read) judgeEarly(config, occurrence, known.clock)
}

function judgeEarly(config: ClaimConfig, occurrence: number, clock: TableKnowledge['clock']): void {
  const { table, jobName, logger } = config
  if (clock === undefined) return
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
}
