/**
 * Replicas of one process that name occurrences, for the occurrence tests: each has a pool of its
 * own and fires for every slot of an epoch-aligned schedule at a random delay, the way a late
 * timer does. Everything a claim did is kept (when it was sent, when its tick started, when it
 * settled), so a test can tell afterwards which slots some replica fired for with nothing in the
 * way, and those must have run exactly once.
 *
 * Times of the fleet are `performance.now()`: the same clock for every replica, and one that NTP
 * cannot step.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { testDatabaseUrl } from '../../dev/postgres.ts'
import { type LeaseContext, type LeaseLogger, quoteTable, withCronLease } from '../../src/index.ts'

/** A logger that keeps what it is told. */
export function collectingLogger(): { logger: LeaseLogger; warns: string[]; errors: unknown[] } {
  const warns: string[] = []
  const errors: unknown[] = []
  return { warns, errors, logger: { warn: (message) => warns.push(message), debug() {}, error: (e) => errors.push(e) } }
}

/** A lease table of the original package's shape, made by hand: the four columns it always had. */
export async function originalShapeTable(db: pg.Pool, prefix = 'original'): Promise<string> {
  const table = `${prefix}_${randomBytes(5).toString('hex')}`
  await db.query(`CREATE TABLE ${quoteTable(table)} (job_name text PRIMARY KEY, lease_until timestamptz NOT NULL,
    holder text, claimed_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
  return table
}

/**
 * The same table under its schema-qualified name. The library keeps what it learnt of a table by
 * the name it is given (its shape per handle, its warnings per process), so a replica handed this
 * spelling starts as a process that has just started would, though it shares this one and its pool.
 */
export function asAnotherProcess(table: string): string {
  return `public.${table}`
}

/** The items in a uniformly random order (Fisher-Yates). */
export function shuffled<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[items[i], items[j]] = [items[j]!, items[i]!]
  }
  return items
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * This process's wall clock minus the database's, in ms, from the closest of a few readings. A
 * fleet fires by the database's clock, so that no slot is ever ahead of it on a remote server.
 */
export async function clockOffsetMs(db: pg.Pool): Promise<number> {
  let best = { rtt: Number.POSITIVE_INFINITY, offset: 0 }
  for (let i = 0; i < 5; i++) {
    const sent = Date.now()
    const { rows } = await db.query(`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms`)
    const received = Date.now()
    if (received - sent < best.rtt) best = { rtt: received - sent, offset: (sent + received) / 2 - Number(rows[0].ms) }
  }
  return best.offset
}

/** One call a replica made for a slot. */
export interface Fire {
  replica: string
  job: string
  /** The occurrence, ms since the epoch. */
  slot: number
  sentAt: number
  /** When its tick started: set only for a won claim. */
  tickAt?: number
  /** When its tick returned. */
  tickEndAt?: number
  settledAt?: number
  outcome?: 'won' | 'lost' | 'error'
  error?: unknown
}

export interface Replica {
  name: string
  pool: pg.Pool
  /** The table as this replica names it (see asAnotherProcess). */
  table: string
  log: ReturnType<typeof collectingLogger>
  alive: boolean
  /** Set once the replica is killed: when its last statement can have run. */
  deadAt?: number
}

export interface FleetJob {
  name: string
  /** Whether its claims name the occurrence; false: lease only, as before. */
  keyed: boolean
}

export interface FleetOptions {
  table: string
  /** Where each won tick records its run: (job, occurrence, holder, claimed_at). */
  runs: string
  jobs: FleetJob[]
  intervalMs: number
  leaseMs: number
  /** Each fire comes a random [0, lateMs) after its slot. */
  lateMs: number
  /** Each tick works a random [0, workMs). */
  workMs: number
}

const POOL_SIZE = 8

/** A table of runs; occurrences are not unique in it, so duplicates are counted, not refused. */
export async function fleetRunsTable(db: pg.Pool): Promise<string> {
  const runs = `occ_runs_${randomBytes(5).toString('hex')}`
  await db.query(`CREATE TABLE ${runs} (job text NOT NULL, occurrence timestamptz NOT NULL, holder text NOT NULL,
    claimed_at timestamptz)`)
  return runs
}

/**
 * A fleet of replicas firing every job for every slot. The fleet fires by the database clock (see
 * clockOffsetMs) and never for a slot ahead of it.
 */
export class Fleet {
  readonly fires: Fire[] = []
  readonly replicas: Replica[] = []
  /** Windows in which something else held the job's row lock (a forced expiry), per job. */
  readonly locks: { job: string; from: number; to: number }[] = []
  private readonly timers = new Map<Replica, Set<NodeJS.Timeout>>()
  private readonly pending = new Set<Promise<void>>()
  private readonly tickWaiters: { replica: string; resolve: (fire: Fire | null) => void }[] = []

  constructor(
    readonly options: FleetOptions,
    private readonly offsetMs: number,
  ) {}

  /** The slot the database clock is in now. */
  currentSlot(): number {
    const { intervalMs } = this.options
    return Math.floor((Date.now() - this.offsetMs) / intervalMs) * intervalMs
  }

  /** Starts a replica, with a pool of its own; it fires once `schedule` says when. */
  async start(name: string, table: string): Promise<Replica> {
    const pool = new pg.Pool({
      connectionString: await testDatabaseUrl(),
      max: POOL_SIZE,
      idleTimeoutMillis: 0,
      application_name: `fleet-${name}`,
    })
    // A connection the server ended (the kill) is reported here.
    pool.on('error', () => {})
    // Every connection is made now and kept, so none is still being made when the replica is
    // killed: one that connected after the kill would send a claim from a dead replica.
    const clients = await Promise.all(Array.from({ length: POOL_SIZE }, () => pool.connect()))
    for (const client of clients) client.release()
    const replica: Replica = { name, pool, table, log: collectingLogger(), alive: true }
    this.replicas.push(replica)
    this.timers.set(replica, new Set())
    return replica
  }

  /** Makes `replica` fire every job for the slots from `fromSlot` to `toSlot` (inclusive), each late at random. */
  schedule(replica: Replica, fromSlot: number, toSlot: number): void {
    const timers = this.timers.get(replica)!
    const { intervalMs, lateMs, jobs } = this.options
    for (let slot = fromSlot; slot <= toSlot; slot += intervalMs) {
      for (const job of jobs) {
        const at = slot + Math.random() * lateMs + this.offsetMs
        const timer = setTimeout(
          () => {
            timers.delete(timer)
            this.fire(replica, job, slot)
          },
          Math.max(0, at - Date.now()),
        )
        timers.add(timer)
      }
    }
  }

  private fire(replica: Replica, job: FleetJob, slot: number): void {
    if (!replica.alive) return
    const { runs, leaseMs, workMs } = this.options
    const record: Fire = { replica: replica.name, job: job.name, slot, sentAt: performance.now() }
    this.fires.push(record)
    const occurrence = new Date(slot)
    const tick = async (ctx: LeaseContext) => {
      record.tickAt = performance.now()
      for (const waiter of this.tickWaiters.filter((w) => w.replica === replica.name)) waiter.resolve(record)
      // A killed replica does nothing more, as a killed process would not.
      if (!replica.alive) throw new Error(`${replica.name} was killed`)
      await replica.pool.query(
        `INSERT INTO ${runs} (job, occurrence, holder, claimed_at) VALUES ($1, $2, $3, ($4::text)::timestamptz)`,
        [job.name, occurrence, replica.name, ctx.claimToken],
      )
      await sleep(Math.random() * workMs)
      record.tickEndAt = performance.now()
    }
    const opts = job.keyed
      ? { table: replica.table, holder: replica.name, logger: replica.log.logger, occurrence }
      : { table: replica.table, holder: replica.name, logger: replica.log.logger }
    const done = withCronLease(replica.pool, job.name, leaseMs, tick, opts).then(
      (outcome) => {
        record.outcome = outcome.ran ? 'won' : 'lost'
      },
      (error: unknown) => {
        record.outcome = record.tickAt === undefined ? 'error' : 'won'
        record.error = error
      },
    )
    const settled = done.finally(() => {
      record.settledAt = performance.now()
      this.pending.delete(settled)
    })
    this.pending.add(settled)
  }

  /** Resolves with the next tick `replica` starts, or null after `withinMs`. */
  nextTick(replica: Replica, withinMs: number): Promise<Fire | null> {
    return new Promise((resolve) => {
      const waiter = {
        replica: replica.name,
        resolve: (fire: Fire | null) => {
          clearTimeout(timer)
          this.tickWaiters.splice(this.tickWaiters.indexOf(waiter), 1)
          resolve(fire)
        },
      }
      const timer = setTimeout(() => waiter.resolve(null), withinMs)
      this.tickWaiters.push(waiter)
    })
  }

  /**
   * Kills a replica as a process dies: it fires no more, its ticks do nothing more, and its
   * connections are ended by the server (waiting until they are gone), with whatever they had in
   * flight. After this none of its statements can run.
   */
  async kill(replica: Replica, admin: pg.Pool): Promise<void> {
    replica.alive = false
    for (const timer of this.timers.get(replica) ?? []) clearTimeout(timer)
    // A query sent a moment ago waits in the pool's queue until its next turn, even with
    // connections idle; ended with one queued, the pool would never send it nor fail it.
    for (let turn = 0; turn < 100 && replica.pool.waitingCount > 0; turn++) await new Promise(setImmediate)
    const waiting = replica.pool.waitingCount
    const ending = replica.pool.end().catch(() => {})
    await admin.query(
      `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`,
      [`fleet-${replica.name}`],
    )
    replica.deadAt = performance.now()
    await ending
    if (waiting > 0) {
      throw new Error(
        `${replica.name} had ${waiting} claims waiting for a connection when killed: its pool is too small`,
      )
    }
  }

  /** Ends a job's lease now, as a lease running out mid-tick would, recording how long the row was locked. */
  async expire(admin: pg.Pool, job: string): Promise<void> {
    const from = performance.now()
    await admin.query(
      `UPDATE ${quoteTable(this.options.table)} SET lease_until = clock_timestamp() - interval '1 second' WHERE job_name = $1`,
      [job],
    )
    this.locks.push({ job, from, to: performance.now() })
  }

  /** Resolves once every call made so far has settled, or rejects after `withinMs`. */
  async settle(withinMs: number): Promise<void> {
    const deadline = performance.now() + withinMs
    while (this.pending.size > 0) {
      const left = deadline - performance.now()
      if (left <= 0) throw new Error(`${this.pending.size} claims still unsettled after ${withinMs} ms`)
      let timer: NodeJS.Timeout | undefined
      await Promise.race([Promise.all(this.pending), new Promise((resolve) => (timer = setTimeout(resolve, left)))])
      clearTimeout(timer)
    }
  }

  async end(): Promise<void> {
    for (const timers of this.timers.values()) for (const timer of timers) clearTimeout(timer)
    await Promise.all(this.replicas.filter((r) => !r.pool.ending).map((r) => r.pool.end().catch(() => {})))
  }
}

/** What the fleet's history says of one job. */
export interface SlotAudit {
  /** Slots that ran more than once, in the runs table or by ticks started. */
  duplicates: { slot: number; runs: number; ticks: number }[]
  /** Slots some replica fired for with nothing in the way that did not run exactly once. */
  missed: { slot: number; ticks: number; runs: number; fire: Fire }[]
  /** How many slots had such a fire: the ones the check could hold to running. */
  unobstructed: number
  slots: number
}

// The slack on both sides of a window, for the clocks' resolution.
const SLACK_MS = 5

/**
 * Audits one job of a fleet's history. A slot must run exactly once when some replica fired for
 * it and, for the whole time its claim was in flight, nothing could have stood in its way:
 * - no claim of this slot or a later one had been sent (its key bars this one);
 * - no lease was held: a won claim holds it from some moment between sending and its tick's
 *   start until `leaseMs` later, and a claim whose outcome is unknown (cut by a kill) from its
 *   sending until its replica died, plus the lease;
 * - nothing else held the row's lock: a forced expiry, or a won tick's outcome record (written
 *   between the tick's end and the call settling), which a claim skips rather than waits for.
 * Every other slot may be missed, but none may run twice.
 */
export function auditSlots(
  fleet: Fleet,
  job: string,
  runsBySlot: Map<number, number>,
  leaseMs: number,
  endAt: number,
): SlotAudit {
  const fires = fleet.fires.filter((f) => f.job === job)
  const deadAt = new Map(fleet.replicas.map((r) => [r.name, r.deadAt]))
  const claims = fires.flatMap((f) => {
    if (f.tickAt !== undefined) return [{ fire: f, from: f.sentAt, to: f.tickAt }]
    if (f.outcome === 'lost') return []
    // Unknown: the claim may have been made at any moment until its replica could run no more.
    const end = Math.min(f.settledAt ?? endAt, deadAt.get(f.replica) ?? endAt)
    return [{ fire: f, from: f.sentAt, to: end }]
  })
  const busy = [
    ...claims.map((c) => ({ from: c.from, to: c.to + leaseMs, fire: c.fire as Fire | undefined })),
    ...fires
      .filter((f) => f.tickEndAt !== undefined)
      .map((f) => ({ from: f.tickEndAt!, to: f.settledAt ?? endAt, fire: f as Fire | undefined })),
    ...fleet.locks.filter((l) => l.job === job).map((l) => ({ from: l.from, to: l.to, fire: undefined })),
  ]
  const ticks = new Map<number, number>()
  for (const f of fires) if (f.tickAt !== undefined) ticks.set(f.slot, (ticks.get(f.slot) ?? 0) + 1)
  const slots = [...new Set(fires.map((f) => f.slot))].sort((a, b) => a - b)

  const duplicates: SlotAudit['duplicates'] = []
  const missed: SlotAudit['missed'] = []
  let unobstructed = 0
  for (const slot of slots) {
    const runs = runsBySlot.get(slot) ?? 0
    const started = ticks.get(slot) ?? 0
    if (runs > 1 || started > 1) duplicates.push({ slot, runs, ticks: started })
    const clear = fires.find((f) => {
      if (f.slot !== slot || f.settledAt === undefined || f.outcome === 'error') return false
      if (deadAt.get(f.replica) !== undefined && f.settledAt >= deadAt.get(f.replica)!) return false
      const from = f.sentAt - SLACK_MS
      const to = (f.tickAt ?? f.settledAt) + SLACK_MS
      const keyed = claims.some((c) => c.fire !== f && c.fire.slot >= slot && c.from < to)
      const held = busy.some((b) => b.fire !== f && b.from < to && b.to > from)
      return !keyed && !held
    })
    if (clear === undefined) continue
    unobstructed++
    // The tick that started is the run; a killed replica's may have started and recorded nothing.
    const winner = fires.find((f) => f.slot === slot && f.tickAt !== undefined)
    const cut = winner !== undefined && deadAt.get(winner.replica) !== undefined && runs === 0
    if (started !== 1 || (runs !== 1 && !cut)) missed.push({ slot, ticks: started, runs, fire: clear })
  }
  return { duplicates, missed, unobstructed, slots: slots.length }
}
