import { publishClaim, traceTick } from './channels.js'
import { checkClock, clockOffset } from './clock.js'
import { monotonicMs, openContext } from './context.js'
import { escapeControls } from './escape.js'
import { type Compiled, compileCall, type EntryPoint } from './options.js'
import { migrateCommand, recordOutcome, type Settled, warn, warnShape } from './outcome.js'
import type { IntervalLease } from './presets.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { DEFAULT_TABLE } from './sql.js'
import { clearWarning, handleState, tableState, warnOnce } from './state.js'
import type { KeepAlive, LeaseContext, LeaseLogger, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkFunction, checkJobName, checkMs, checkQueryable, fail } from './validate.js'

/**
 * Runs `runTick` on exactly one replica per occurrence. Every replica calls this on every tick;
 * one atomic statement gives the lease to a single claimant, which runs the tick, while the
 * others resolve `{ ran: false, result: null }` without writing anything.
 *
 * Name the occurrence (`opts.occurrence`, the slot the scheduler fires for) and the claim is keyed
 * on it: no replica, however late, runs an occurrence that already ran, nor an earlier one, and
 * the lease only has to keep runs from overlapping. Without one, the lease stands in for the
 * occurrence: it is never released and lasts `leaseMs` by the database clock (about 80% of the
 * interval, see {@link LEASE}), so a replica whose timer fires late still finds it taken.
 *
 * Failure rule, a missed occurrence beats a duplicate: a bad argument rejects with a TypeError
 * before any query; a claim error rejects unchanged and the tick does not run; a tick that throws
 * rejects unchanged and keeps the lease. When the tick settles, its outcome is recorded in the
 * lease row (see `record`); that never changes the result.
 *
 * @example
 * import cron from 'node-cron'
 * import pg from 'pg'
 * import { LEASE, withCronLease } from 'pg-cron-lease'
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * cron.schedule('0 * * * *', (run) =>
 *   withCronLease(pool, 'billing:hourly', LEASE.HOURLY, async (ctx) => {
 *     await chargeCustomers()
 *   }, { occurrence: run.date, nextOccurrence: run.task?.getNextRun() }),
 * )
 */
export function withCronLease<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeaseOptions,
): Promise<LeaseOutcome<T>> {
  let config: ReturnType<typeof runConfig<T>>
  try {
    config = runConfig('withCronLease', db, jobName, leaseMs, runTick, opts)
  } catch (error) {
    return Promise.reject(error)
  }
  return runLease(config, config.slot)
}

/** What a claim needs, checked: the coordinator builds one per task run, the tick entry points one per call. */
export interface ClaimConfig {
  readonly db: Queryable
  readonly table: string
  readonly jobName: string
  readonly leaseMs: number
  readonly holder: string
  readonly logger: LeaseLogger | undefined
  /** Send it as a named prepared statement where the driver allows it. */
  readonly prepare: boolean
  /** How far ahead of the database clock an occurrence may lie; undefined: 10% of the lease. */
  readonly clockToleranceMs?: number | undefined
}

/** Everything one run of a tick needs, checked once. */
export interface RunConfig<T> extends ClaimConfig {
  readonly runTick: (ctx: LeaseContext) => Promise<T> | T
  readonly keepAlive: KeepAlive | undefined
  readonly record: boolean
  /** The declared interval, if any. */
  readonly everyMs: number | undefined
}

/**
 * Where one call stands in the job's schedule, as this replica's scheduler knows it: what the
 * claim is keyed on and what the winner stores. Instants are ms since the epoch; null is unknown.
 */
export interface Slot {
  /** The occurrence the call is for. */
  readonly occurrence: number | null
  /** When this replica's scheduler fires next, on this replica's clock. */
  readonly nextOccurrence: number | null
  /** The job's interval, for counting missed occurrences: declared, else the gap to the next occurrence. */
  readonly intervalMs: number | null
}

/**
 * The slot of one call from what it was told, or null when it was told nothing (the claim is then
 * exactly the lease-only claim). With `everyMs` the next occurrence is one interval after this
 * one, or after now when none is named.
 */
export function slotOf(
  occurrence: number | null,
  nextOccurrence: number | null,
  everyMs: number | undefined,
): Slot | null {
  if (occurrence === null && nextOccurrence === null && everyMs === undefined) return null
  const next = nextOccurrence ?? (everyMs === undefined ? null : (occurrence ?? Date.now()) + everyMs)
  const gap = occurrence !== null && next !== null && next > occurrence ? next - occurrence : null
  return { occurrence, nextOccurrence: next, intervalMs: everyMs ?? gap }
}

/**
 * A won claim, all its fences need: the claim it was made with, the token it is fenced on, when it
 * was sent (`monotonicMs()`), and whether the table can take the outcome record.
 */
export interface Ticket {
  readonly config: ClaimConfig
  /** `claimed_at` as text with microseconds; null when the driver returned no row to read it from. */
  readonly claimToken: string | null
  readonly sentAt: number
  /** Whether the table has the outcome columns; undefined when the reply did not say. */
  readonly recordable: boolean | undefined
  /** The occurrence the claim was keyed on, or null. */
  readonly occurrence: Date | null
  /** Occurrences that fell due unclaimed before this one (0 when unknown). */
  readonly missed: number
  /** The interval to record as the job's: the slot's, or null to let the table observe it. */
  readonly intervalMs: number | null
}

/**
 * The arguments of `withCronLease` and `leasedTick`, checked in the order they are declared, with
 * the options compiled once per options object (src/options.ts). Throws the TypeError of the first
 * bad one. `leaseMs` may be what `forInterval` returns, which declares the interval as well.
 */
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
    db: queryable,
    jobName: job,
    leaseMs: lease.leaseMs,
    runTick: tick,
    holder: options.holder,
    table: options.table,
    logger: options.logger,
    keepAlive: options.keepAlive,
    prepare: options.prepare,
    record: options.record,
    everyMs,
    clockToleranceMs: options.clockToleranceMs,
    options,
    slot: slotOf(occurrence, nextOccurrence, everyMs),
    nextOccurrence,
  }
}

/** A lease length, or the lease and interval `forInterval` made (read once, as it may be a Proxy). */
function checkLease(value: unknown): { leaseMs: number; everyMs: number | undefined } {
  if (typeof value !== 'object' || value === null) return { leaseMs: checkMs(value, 'leaseMs'), everyMs: undefined }
  let leaseMs: unknown
  let everyMs: unknown
  try {
    ;({ leaseMs, everyMs } = value as IntervalLease)
  } catch {
    return fail('leaseMs', 'a number of milliseconds, or what forInterval() returns', value)
  }
  if (typeof leaseMs !== 'number' || typeof everyMs !== 'number') {
    fail('leaseMs', 'a number of milliseconds, or what forInterval() returns', value)
  }
  return {
    leaseMs: checkMs(leaseMs, 'leaseMs.leaseMs'),
    everyMs: checkMs(everyMs, 'leaseMs.everyMs', Number.MAX_SAFE_INTEGER),
  }
}

/**
 * The one run path behind `withCronLease` and `leasedTick`: claim, run the tick with its context,
 * record the outcome. The config must already be checked.
 *
 * The losing path (every tick of every replica but one) is kept to plain promise steps, and so is
 * everything it calls: each `async` layer costs turns of the microtask queue, and with many cron
 * jobs those add up against a claim that is itself one short round trip.
 */
export function runLease<T>(config: RunConfig<T>, slot: Slot | null = null): Promise<LeaseOutcome<T>> {
  return claim(config, slot).then((ticket) => (ticket === null ? LOST : runClaimed(config, ticket)))
}

const LOST: LeaseOutcome<never> = Object.freeze({ ran: false, result: null })

/** Runs the tick of a won claim (of any kind: a claim, a catch-up) and records how it ended. */
export async function runClaimed<T>(config: RunConfig<T>, ticket: Ticket): Promise<LeaseOutcome<T>> {
  const { jobName, leaseMs, holder, keepAlive } = config
  const { claimToken } = ticket
  if (keepAlive && claimToken === null) {
    throw new TypeError(
      `pg-cron-lease: keepAlive cannot fence the lease for '${jobName}': the claim's result had no row to read ` +
        'its claim token from; the lease is held until it expires and the tick did not run',
    )
  }

  const { ctx, close } = openContext(ticket, keepAlive)
  const startedAt = monotonicMs()
  let settled: Settled = { outcome: 'ok' }
  try {
    const result = await traceTick(
      () => config.runTick(ctx),
      () => ({ jobName, holder, claimToken, leaseMs }),
    )
    return { ran: true, result }
  } catch (error) {
    settled = { outcome: 'error', error }
    throw error
  } finally {
    close()
    if (config.record) {
      await recordOutcome(ticket, monotonicMs() - startedAt, config.everyMs ?? ticket.intervalMs ?? undefined, settled)
    }
  }
}

/** Which claim statement was sent: the lease alone, keyed on the occurrence, or keyed on an unknown shape. */
type ClaimKind = 'lease' | 'keyed' | 'probing'

/**
 * The claim step on its own: one statement, its result read, the outcome published. Shared by
 * runLease and leaseCoordinator (which runs no tick itself), so there is one claim path. The
 * config must already be checked. Resolves the ticket of a won claim, or null for a lost one; a
 * driver error or an unreadable result rejects.
 *
 * Without a slot it is the lease-only claim, exactly. With one, the statement depends on what is
 * known of the table: keyed on the occurrence once a won claim said the table has the columns;
 * before that, a claim that keeps to the occurrences others keyed and writes none itself, whose
 * win then keys itself with a second statement (once per process and table). A losing claim is
 * one statement on every shape.
 */
export function claim(config: ClaimConfig, slot: Slot | null = null): Promise<Ticket | null> {
  if (slot !== null) checkGap(config, slot)
  return send(config, slot, slot !== null && handleState(config.db).keyed.has(config.table))
}

function send(config: ClaimConfig, slot: Slot | null, keyed: boolean): Promise<Ticket | null> {
  const { db, table, jobName, leaseMs, holder, prepare } = config
  const state = tableState(table)
  const sentAt = monotonicMs()
  const sentWallMs = Date.now()
  let kind: ClaimKind = 'lease'
  let statement = state.claim
  let params: unknown[] = [jobName, leaseMs, holder]
  if (slot !== null) {
    const { occurrence } = slot
    if (keyed) {
      kind = 'keyed'
      statement = state.occurrenceClaim
      params = [
        jobName,
        leaseMs,
        holder,
        occurrence,
        nextDueMs(slot, sentWallMs),
        slot.intervalMs,
        toleranceOf(config),
        slot.nextOccurrence,
      ]
    } else if (occurrence !== null) {
      kind = 'probing'
      statement = state.probingClaim
      params = [jobName, leaseMs, holder, occurrence, toleranceOf(config)]
    }
  }
  return runStatement(db, statement, params, prepare).then(
    (result) => readClaim(config, slot, kind, result, sentAt, sentWallMs),
    (error: unknown) => {
      // The keyed claim names the occurrence columns, and this handle reached a table of that name
      // without them (another database, another schema): Postgres refuses the text before running
      // anything, so the claim is sent again as one that runs on every shape.
      if (kind === 'keyed' && (error as { code?: unknown } | null)?.code === '42703') {
        handleState(db).keyed.delete(table)
        return send(config, slot, false)
      }
      return Promise.reject(missingTable(error, table))
    },
  )
}

/** How far ahead of the database clock an occurrence may lie: the option, else 10% of the lease. */
export function toleranceOf(config: ClaimConfig): number {
  return config.clockToleranceMs ?? Math.floor(config.leaseMs / 10)
}

/** The next occurrence as ms from `wallMs` on this replica's clock, the duration the database adds to its own. */
export function nextDueMs(slot: Slot | null, wallMs: number): number | null {
  return slot?.nextOccurrence == null ? null : slot.nextOccurrence - wallMs
}

/**
 * A lease not shorter than the gap between occurrences is still held when the next one fires, so
 * that one is skipped, and nothing else would say so: one warning per job.
 */
function checkGap({ table, jobName, leaseMs, logger }: ClaimConfig, { intervalMs }: Slot): void {
  if (intervalMs === null || leaseMs < intervalMs) return
  warnOnce(table, `gap:${jobName}`, () =>
    warn(
      logger,
      `pg-cron-lease: the ${leaseMs} ms lease of '${escapeControls(jobName)}' is not shorter than the ${intervalMs} ms ` +
        'between its occurrences: each claim still holds the lease when the next occurrence fires, so that one is ' +
        `skipped; set a lease shorter than the gap (forInterval(${intervalMs}), or as long as one run may take)`,
    ),
  )
}

/**
 * A claim on a table that does not exist (42P01, naming the lease table) says which table and how
 * to make it; the driver's error stays as `cause`, and its `code` on the error. Any
 * other error is unchanged.
 */
function missingTable(error: unknown, table: string): unknown {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  // Postgres names the relation as written (`relation "jobs.leases" does not exist`); a 42P01 about
  // another one (a trigger on the table naming a missing relation) is not this.
  if (code !== '42P01' || typeof message !== 'string' || !message.includes(`"${table}"`)) return error
  // The driver's code is kept on the error, so code that already tests for 42P01 still does.
  return Object.assign(
    new Error(
      `pg-cron-lease: the lease table ${table} does not exist (or this role cannot see it): create it with ` +
        `\`${migrateCommand(table)}\`, or run createTableSql(${table === DEFAULT_TABLE ? '' : JSON.stringify(table)}) ` +
        'in a migration; the tick did not run',
      { cause: error },
    ),
    { code: '42P01' },
  )
}

async function readClaim(
  config: ClaimConfig,
  slot: Slot | null,
  kind: ClaimKind,
  result: unknown,
  sentAt: number,
  sentWallMs: number,
): Promise<Ticket | null> {
  const { table, jobName, leaseMs, holder, logger } = config
  const { matched: won, claimToken } = readResult(result, jobName, 'claimed')
  if (!won) {
    publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs: null }))
    logger?.debug?.(
      kind === 'lease' || slot?.occurrence == null
        ? `pg-cron-lease: '${jobName}' skipped: lease held by another replica`
        : `pg-cron-lease: '${jobName}' skipped ${new Date(slot.occurrence).toISOString()}: lease held, that occurrence or a later one already claimed, or it is too early`,
    )
    if (kind !== 'lease' && slot?.occurrence != null) await checkEarly(config, slot.occurrence)
    return null
  }
  const receivedWallMs = Date.now()
  const clockOffsetMs = claimToken !== null ? clockOffset(claimToken, sentWallMs, receivedWallMs) : null
  publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs }))
  const known = handleState(config.db)
  if (clockOffsetMs !== null) {
    known.clocks.set(table, { offsetMs: clockOffsetMs, at: monotonicMs() })
    checkClock(table, jobName, clockOffsetMs, receivedWallMs - sentWallMs, leaseMs, logger)
  }
  const row = firstRow(result)
  const recordable = typeof row?.recordable === 'boolean' ? row.recordable : undefined
  const occurrence = slot?.occurrence == null ? null : new Date(slot.occurrence)
  const ticket = (missed: unknown): Ticket => ({
    config,
    claimToken,
    sentAt,
    recordable,
    occurrence,
    missed: countOf(missed),
    intervalMs: slot?.intervalMs ?? null,
  })
  if (slot?.occurrence != null) clearWarning(table, `early:${jobName}`)
  if (kind === 'keyed') return ticket(row?.missed)
  if (row?.keyed === true) known.keyed.add(table)
  else if (row?.keyed === false && slot !== null) warnShape(table, logger, recordable === true)
  // A claim won on a table whose occurrence columns it did not know of keys itself now, fenced on
  // its token, before the tick runs: else a replica that keys its claims could run it again.
  if (slot === null || row?.keyed !== true || claimToken === null) return ticket(0)
  const keyed = await runStatement(
    config.db,
    tableState(table).keyClaim,
    [jobName, claimToken, slot.occurrence, nextDueMs(slot, sentWallMs), slot.intervalMs, slot.nextOccurrence],
    config.prepare,
  )
  const reading = readResult(keyed, jobName, 'keyed on its occurrence')
  // No row: a keyed claim of this occurrence or a later one was made since; this run must not happen.
  return reading.matched ? ticket(firstRow(keyed)?.missed) : null
}

function firstRow(result: unknown): Record<string, unknown> | undefined {
  const row = (result as { rows?: unknown[] } | null)?.rows?.[0]
  return typeof row === 'object' && row !== null ? (row as Record<string, unknown>) : undefined
}

/** A count from the database: a bigint arrives as text from most drivers. */
function countOf(value: unknown): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : 0
  return Number.isSafeInteger(n) && n > 0 ? n : 0
}

/** How old this process's estimate of its clock against the database's may be before a loser asks again. */
export const CLOCK_CHECK_EVERY_MS = 60_000

/**
 * A loser cannot tell from its empty reply whether the lease was held, the occurrence already run,
 * or the occurrence too early; only the last needs saying (this replica's clock runs fast, and it
 * will never run the job). The occurrence is judged against this replica's estimate of the
 * database clock, kept per table: every won claim refreshes it for free, and a replica that has
 * not won for a minute reads the database clock once (one read-only statement, at most once a
 * minute per table, however many jobs lose). A failure to read it says nothing either way.
 */
async function checkEarly(config: ClaimConfig, occurrence: number): Promise<void> {
  const { db, table, jobName, logger, prepare } = config
  const state = tableState(table)
  const { clocks } = handleState(db)
  let clock = clocks.get(table)
  if (clock === undefined || monotonicMs() - clock.at >= CLOCK_CHECK_EVERY_MS) {
    const sentWallMs = Date.now()
    let text: unknown
    try {
      text = firstRow(await runStatement(db, state.clockRead, [], prepare))?.checked_at
    } catch {
      return
    }
    const offsetMs = typeof text === 'string' ? clockOffset(text, sentWallMs, Date.now()) : null
    if (offsetMs === null) return
    clock = { offsetMs, at: monotonicMs() }
    clocks.set(table, clock)
  }
  const aheadMs = occurrence - (Date.now() - clock.offsetMs)
  const tolerance = toleranceOf(config)
  if (!(aheadMs > tolerance)) return clearWarning(table, `early:${jobName}`)
  warnOnce(table, `early:${jobName}`, () =>
    warn(
      logger,
      `pg-cron-lease: '${escapeControls(jobName)}' did not run its occurrence ${new Date(occurrence).toISOString()}: it lies ` +
        `about ${Math.round(aheadMs)} ms ahead of the database clock, more than the ${tolerance} ms tolerance; this ` +
        "replica's clock runs fast, and it runs no occurrence of this job until that is fixed: fix its time sync (NTP)",
    ),
  )
}
