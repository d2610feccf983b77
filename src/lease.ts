import { publishClaim, publishRunEnd, publishRunStart, traceTick } from './channels.js'
import { checkClock, clockOffset } from './clock.js'
import { checkKeepAliveHandle, openContext } from './context.js'
import { draining, type InFlight, openRun, type RunGroup, untilStopped } from './drain.js'
import { escapeControls } from './format-value.js'
import { knowledgeOf, type TableKnowledge } from './handle.js'
import { clearWarning, debug, firstWarning, migrateCommand, warn, warnShape } from './log.js'
import { type CatchUpWindow, type Compiled, compileCall, type EntryPoint } from './options.js'
import { recordOutcome, type Settled } from './outcome.js'
import { type IntervalLease, MAX_INTERVAL_MS } from './presets.js'
import { codeOf, runStatement, type Statement, statementsOf } from './query.js'
import { readResult } from './result.js'
import { type ClaimKind, DEFAULT_TABLE, type Shape } from './sql.js'
import { readFacts, shapeOf } from './table-facts.js'
import { type ClaimConfig, historyParams, type RunConfig, type Slot, slotOf, type Ticket, wonTicket } from './ticket.js'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkFunction, checkJobName, checkMs, checkQueryable, fail, readOrFail } from './validate.js'

/**
 * Runs `runTick` on exactly one replica per occurrence; the others resolve `{ ran: false }` without writing. A missed
 * occurrence beats a duplicate: a claim error rejects, running nothing; a thrown tick keeps its lease ({@link LEASE}).
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

/** Options for {@link catchUp}: `withinMs` is required. */
export interface CatchUpOptions
  extends Pick<
      LeaseOptions,
      'holder' | 'table' | 'logger' | 'keepAlive' | 'prepare' | 'record' | 'history' | 'everyMs'
    >,
    CatchUpWindow {
  /** When this replica's scheduler fires next; left out, one interval after the occurrence made up for. */
  nextOccurrence?: Date | string | null
}

/**
 * Runs the tick once when the job's due occurrence passed unclaimed within `withinMs`, on at most one replica;
 * a backlog collapses into the latest. Never for a job with no recorded due time: a fresh install cannot stampede.
 *
 * @example
 * await catchUp(pool, 'report', LEASE.HOURLY, sendReport, { withinMs: 6 * 3_600_000, everyMs: 3_600_000 })
 */
export async function catchUp<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts: CatchUpOptions,
): Promise<LeaseOutcome<T>> {
  return runCatchUp(runConfig<T>('catchUp', db, jobName, leaseMs, runTick, opts))
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

/** The one run path: claim (a catch-up's, given `withinMs`), run, record; in flight for drainLeases throughout. */
export async function runLease<T>(
  config: RunConfig<T>,
  slot: Slot | null,
  group?: RunGroup,
  withinMs?: number,
): Promise<LeaseOutcome<T>> {
  const run = openRun(config.jobName, group)
  if (run === null) return NOT_RUN
  try {
    const won = await claim(config, slot, withinMs)
    return won === null ? NOT_RUN : await runClaimed(config, won, run)
  } finally {
    run.end()
  }
}

// The next occurrence as given: left out, the database derives it better than now + everyMs.
export function runCatchUp<T>(
  config: ReturnType<typeof runConfig<T>>,
  group?: RunGroup,
  withinMs = config.options.withinMs,
): Promise<LeaseOutcome<T>> {
  const slot = { occurrence: null, nextOccurrence: config.nextOccurrence, intervalMs: config.everyMs ?? null }
  return runLease(config, slot, group, withinMs)
}

export const NOT_RUN: LeaseOutcome<never> = Object.freeze({ ran: false, result: null })

async function runClaimed<T>(config: RunConfig<T>, ticket: Ticket, run: InFlight): Promise<LeaseOutcome<T>> {
  const { jobName, leaseMs, holder, keepAlive } = config
  const { claimToken } = ticket
  if (keepAlive && claimToken === null)
    throw new TypeError(
      `pg-cron-lease: keepAlive cannot fence the lease for '${jobName}': the claim's result had no row to read ` +
        'its claim token from; the lease is held until it expires and the tick did not run',
    )
  const { ctx, close, stop } = openContext(ticket)
  publishRunStart(ticket)
  const startedAt = performance.now()
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
    const durationMs = performance.now() - startedAt
    if (config.record) await recordOutcome(ticket, durationMs, settled, sent)
    publishRunEnd(ticket, settled, durationMs)
  }
}

/** The one claim path, a catch-up's too (given `withinMs`): the won ticket, or null. */
export async function claim(config: ClaimConfig, slot: Slot | null = null, withinMs?: number): Promise<Ticket | null> {
  const { db, table, jobName, holder, logger, prepare } = config
  const catchingUp = withinMs !== undefined
  if (slot !== null && !catchingUp) checkGap(config, slot)
  const known = knowledgeOf(db, table)
  const shape = await shapeOf(config)
  checkKeepAliveHandle(config)
  if (shape === 'original') warnShape(table, logger)
  // A missing table is a miss to report, as a claim's is; the original shape keeps no due time to catch up on.
  if (catchingUp && shape === undefined) throw tableMissing(table)
  if (catchingUp && shape === 'original') return null
  const kind = claimKind(config, shape, known)
  const occurrence = kind === 'original' ? null : (slot?.occurrence ?? null)
  const statements = statementsOf(table, kind)
  const send = (statement: Statement, params: unknown[]) =>
    runStatement(db, statement, params, prepare).catch((error: unknown) => Promise.reject(claimError(config, error)))
  // Most claims lose, to the read-only probe; after a win or a dead heat the next three skip it (docs/performance.md).
  const probing = kind !== 'original' && !catchingUp
  let probed = false
  if (probing && known.unprobed > 0) {
    // Counted as sent: a burst of calls at once skips the probe three times, not once each.
    known.unprobed--
  } else if (probing) {
    const held = await send(statements.probe, [jobName, occurrence])
    if (readResult(held, jobName, 'claimed').matched) return lost(config, occurrence)
    probed = true
  }
  if (draining()) return null
  const sentAt = performance.now()
  const sentWallMs = Date.now()
  const params = claimParams(config, kind, slot, sentWallMs, withinMs)
  const result = await send(catchingUp ? statements.catchUp : statements.claim, params)
  const { matched: won, claimToken } = readResult(result, jobName, catchingUp ? 'claimed to catch up' : 'claimed')
  if (catchingUp) {
    publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs: null }))
    return won ? wonTicket(config, claimToken, sentAt, kind, result, slot, true) : null
  }
  if (won || probed) known.unprobed = 3
  if (!won) return lost(config, occurrence)
  const receivedWallMs = Date.now()
  const clockOffsetMs = claimToken !== null ? clockOffset(claimToken, sentWallMs, receivedWallMs) : null
  publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs }))
  if (clockOffsetMs !== null) {
    known.clock = { offsetMs: clockOffsetMs, at: performance.now() }
    checkClock(config, clockOffsetMs, receivedWallMs - sentWallMs)
  }
  if (occurrence !== null) clearWarning(table, `early:${jobName}`)
  return wonTicket(config, claimToken, sentAt, kind, result, slot)
}

// A table not known to exist gets the original statement, whose refusal names the table.
function claimKind(config: ClaimConfig, shape: Shape | undefined, known: TableKnowledge): ClaimKind {
  if (shape !== 'current') return 'original'
  if (!config.record) return 'lease'
  return known.history && config.history !== false ? 'history' : 'run'
}

// See claimSql and catchUpSql: a catch-up sends its window where a claim sends its occurrence and tolerance.
function claimParams(config: ClaimConfig, kind: ClaimKind, slot: Slot | null, nowMs: number, withinMs?: number) {
  const { jobName, leaseMs, holder } = config
  if (kind === 'original') return [jobName, leaseMs, holder]
  const next = slot?.nextOccurrence ?? null
  const schedule = [next === null ? null : next - nowMs, next, slot?.intervalMs ?? null]
  const due = withinMs === undefined ? [slot?.occurrence ?? null, toleranceOf(config)] : [withinMs]
  const params = [jobName, leaseMs, holder, ...due, ...schedule]
  return kind === 'history' ? [...params, ...historyParams(config)] : params
}

// A table changed under a claim is read again next claim, never guessed; a missing one is named.
function claimError({ db, table }: ClaimConfig, error: unknown): unknown {
  const code = codeOf(error)
  const known = knowledgeOf(db, table)
  // The probe goes first again: a failing handle (a standby) still loses quietly to a held lease.
  known.unprobed = 0
  if (code === '42703') known.shape = undefined
  const message = (error as { message?: unknown } | null)?.message
  // A 42P01 about another relation (a trigger's) is not this.
  if (code !== '42P01' || typeof message !== 'string' || !message.includes(`"${table}"`)) return error
  return tableMissing(table, error)
}

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

function tableMissing(table: string, cause?: unknown): Error {
  const message =
    `pg-cron-lease: the lease table ${table} does not exist (or this role cannot see it): create it with ` +
    `\`${migrateCommand(table)}\`, or run createTableSql(${table === DEFAULT_TABLE ? '' : JSON.stringify(table)}) ` +
    'in a migration; the tick did not run'
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code: '42P01' })
}

// Only a too-early loss needs saying: this replica's clock runs fast, and it never runs the job.
async function lost(config: ClaimConfig, occurrence: number | null): Promise<null> {
  const { db, table, jobName, holder, logger } = config
  publishClaim(() => ({ jobName, holder, won: false, claimToken: null, clockOffsetMs: null }))
  debug(logger, () =>
    occurrence !== null
      ? `pg-cron-lease: '${jobName}' skipped ${new Date(occurrence).toISOString()}: lease held, that occurrence or a later one already claimed, or it is too early`
      : `pg-cron-lease: '${jobName}' skipped: lease held by another replica`,
  )
  if (occurrence === null) return null
  const known = knowledgeOf(db, table)
  // The offset is kept fresh by won claims, else by a facts read at most once a minute.
  const stale = known.clock === undefined || performance.now() - known.clock.at >= 60_000
  // A failed read leaves nothing to judge by.
  if (stale && (await readFacts(config, known).catch(() => null)) === null) return null
  if (known.clock === undefined) return null
  const aheadMs = occurrence - (Date.now() - known.clock.offsetMs)
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
