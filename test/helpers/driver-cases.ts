/**
 * The core integration cases, written once and run against every driver the library supports
 * (`test/integration/drivers/drivers.test.ts` lists them). A driver only says how to open a session and
 * how its users run one guarded tick; the cases and their assertions are the same for all.
 */

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, afterEach, before, describe, test } from 'node:test'
import { expireLease } from '../../dev/postgres.ts'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from '../../src/index.ts'
import { createTableSql, quoteTable, withCronLease } from '../../src/index.ts'

/** One replica's session on the database. */
export interface Claimant {
  db: Queryable
  /** One guarded tick the way this driver's users run it (for most, `withCronLease(db, …)`). */
  lease<T>(
    jobName: string,
    leaseMs: number,
    tick: (ctx: LeaseContext) => T | Promise<T>,
    opts: LeaseOptions,
  ): Promise<LeaseOutcome<T>>
}

/** A claimant and how to close its session. */
export interface Session {
  claimant: Claimant
  close(): Promise<void> | void
}

export interface DriverEnv {
  /** A session for setup and inspection, outside any claimant's transaction. */
  admin: Queryable
  /** Opens one claimant's session; the cases close it at the end of each test. */
  open(): Promise<Session>
  /** Closes the admin session and anything shared. */
  stop(): Promise<void> | void
}

export interface Driver {
  name: string
  /**
   * `many`: every claimant has its own session, so claims really run at the same time.
   * `one`: the driver is a single session (PGlite), and simultaneous claims queue on it.
   */
  sessions: 'many' | 'one'
  /**
   * The tick runs inside a transaction that commits when it returns and rolls back when it throws,
   * so a tick that throws takes the claim back with it.
   */
  transactional?: boolean
  start(): Promise<DriverEnv>
}

/** The `lease` of a driver whose users call withCronLease directly. */
export function direct(db: Queryable): Claimant {
  return { db, lease: (jobName, leaseMs, tick, opts) => withCronLease(db, jobName, leaseMs, tick, opts) }
}

const TOKEN = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/
const CLAIMANTS = 10
const ROUNDS = 5

function rowsOf(result: unknown): Record<string, unknown>[] {
  const { rows } = result as { rows?: Record<string, unknown>[] }
  assert.ok(Array.isArray(rows), 'the admin session returns rows')
  return rows
}

function unique(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`
}

export function driverCases(driver: Driver): void {
  describe(`${driver.name}: the lease holds through this driver`, () => {
    let env: DriverEnv
    let table: string
    let t: string
    let opened: Session[] = []
    const claimant = async () => {
      const session = await env.open()
      opened.push(session)
      return session.claimant
    }

    before(async () => {
      env = await driver.start()
      table = unique('drv')
      t = quoteTable(table)
      await env.admin.query(createTableSql(table), [])
    })
    afterEach(async () => {
      const closing = opened
      opened = []
      await Promise.all(closing.map((session) => session.close()))
    })
    after(async () => {
      await env?.stop()
    })

    const expire = (jobName: string) => expireLease(env.admin, table, jobName)

    const untilExpired = async (jobName: string) => {
      for (let i = 0; i < 500; i++) {
        const { rows } = (await env.admin.query(
          `SELECT lease_until <= clock_timestamp() AS over FROM ${t} WHERE job_name = $1`,
          [jobName],
        )) as { rows: Array<{ over: boolean }> }
        if (rows[0]?.over) return
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      throw new Error(`the lease for ${jobName} did not expire within 500 checks`)
    }

    test('the first claim runs the tick, a second within the lease skips, and one after expiry runs', async () => {
      const [a, b] = [await claimant(), await claimant()]
      const job = unique('job')
      assert.deepEqual(await a.lease(job, 60_000, () => 'a', { table, holder: 'a' }), { ran: true, result: 'a' })
      assert.deepEqual(await b.lease(job, 60_000, () => 'b', { table, holder: 'b' }), { ran: false, result: null })
      assert.deepEqual(rowsOf(await env.admin.query(`SELECT holder FROM ${t} WHERE job_name = $1`, [job])), [
        { holder: 'a' },
      ])
      await expire(job)
      assert.deepEqual(await b.lease(job, 60_000, () => 'b', { table, holder: 'b' }), { ran: true, result: 'b' })
    })

    const raceName =
      driver.sessions === 'many'
        ? `${CLAIMANTS} claimants on their own sessions racing one occurrence, ${ROUNDS} rounds: exactly one runs each round`
        : `${CLAIMANTS} claims sent at once through its single session, ${ROUNDS} rounds: exactly one runs each round`
    test(raceName, async () => {
      const claimants: Claimant[] = []
      for (let i = 0; i < (driver.sessions === 'many' ? CLAIMANTS : 1); i++) claimants.push(await claimant())
      const job = unique('race')
      const winnersPerRound: number[] = []
      for (let round = 0; round < ROUNDS; round++) {
        if (round > 0) await expire(job)
        // Each claimant's whole lease call runs concurrently (not just its statement), so a
        // transactional driver commits each claim around its own tick, as its users would.
        const outcomes = await Promise.all(
          Array.from({ length: CLAIMANTS }, (_, i) =>
            claimants[i % claimants.length]!.lease(job, 60_000, () => i, { table, holder: `claimant-${i}` }),
          ),
        )
        winnersPerRound.push(outcomes.filter((o) => o.ran).length)
      }
      assert.deepEqual(winnersPerRound, Array(ROUNDS).fill(1))
    })

    test('renew moves the expiry by the database clock and the claim token is microsecond text', async () => {
      const a = await claimant()
      const job = unique('renew')
      const outcome = await a.lease(
        job,
        1_000,
        async (ctx) => {
          const renewed = await ctx.renew(600_000)
          // Read through the claimant's own session: inside a transaction only it sees the new expiry.
          const left = await a.db.query(
            `SELECT extract(epoch FROM lease_until - clock_timestamp()) * 1000 AS left_ms FROM ${t} WHERE job_name = $1`,
            [job],
          )
          return { renewed, leftMs: Number(rowsOf(left)[0]?.left_ms), token: ctx.claimToken }
        },
        { table, holder: 'a' },
      )
      assert.equal(outcome.ran, true)
      assert.equal(outcome.result?.renewed, true)
      assert.ok((outcome.result?.leftMs ?? 0) > 500_000, `lease left after renew: ${outcome.result?.leftMs} ms`)
      assert.match(outcome.result?.token ?? '', TOKEN)
    })

    /** Runs a claim whose tick waits until `release()`; resolves once the tick has its context. */
    const held = async (who: Claimant, job: string, leaseMs: number) => {
      let ctx: LeaseContext | undefined
      let release!: () => void
      const done = new Promise<void>((resolve) => {
        release = resolve
      })
      const outcome = who.lease(
        job,
        leaseMs,
        (c) => {
          ctx = c
          return done
        },
        { table, holder: 'same' },
      )
      while (!ctx) await new Promise((resolve) => setTimeout(resolve, 5))
      return { ctx, release, outcome }
    }

    const fenceName = driver.transactional
      ? "a claim's transaction keeps a newer claim out until it ends, and its context cannot renew after that"
      : 'a renew from a claim that a newer claim replaced resolves false and aborts its signal'
    test(fenceName, async () => {
      const [a, b] = [await claimant(), await claimant()]
      const job = unique('fence')
      // The same holder name on both: the fence is the claim, not the name.
      if (driver.transactional) {
        // The claim's row stays locked until the tick's transaction ends, so no one can replace
        // the claim under the running tick.
        const open = await held(a, job, 60_000)
        try {
          let settled = false
          const next = b
            .lease(job, 60_000, () => 'b', { table, holder: 'same' })
            .finally(() => {
              settled = true
            })
          await new Promise((resolve) => setTimeout(resolve, 200))
          assert.equal(settled, false, 'the newer claim waits for the open transaction')
          assert.equal(await open.ctx.renew(), true)
          open.release()
          await open.outcome
          assert.equal((await next).ran, false, 'after the commit the lease is still held')
          await assert.rejects(open.ctx.renew(), /its tick has settled/)
        } finally {
          open.release()
        }
        return
      }
      const stale = await held(a, job, 50)
      // Let the lease run out by the database clock rather than expiring it by hand: on a database
      // whose clock has millisecond resolution (PGlite), a hand-made expiry could let the next
      // claim land in the same millisecond, a case real expiry cannot produce.
      await untilExpired(job)
      const fresh = await held(b, job, 60_000)
      assert.notEqual(stale.ctx.claimToken, fresh.ctx.claimToken)
      assert.equal(await stale.ctx.renew(), false)
      assert.equal(stale.ctx.signal.aborted, true)
      assert.equal(await fresh.ctx.renew(), true)
      assert.equal(fresh.ctx.signal.aborted, false)
      stale.release()
      fresh.release()
      await Promise.all([stale.outcome, fresh.outcome])
    })

    const throwsName = driver.transactional
      ? 'a tick that throws rejects with its error, and the rollback takes the claim back: the next claim runs'
      : 'a tick that throws rejects with its error and the lease stays held: the next claim skips'
    test(throwsName, async () => {
      const [a, b] = [await claimant(), await claimant()]
      const job = unique('throws')
      const boom = new Error('tick failed')
      await assert.rejects(
        a.lease(job, 60_000, () => Promise.reject(boom), { table, holder: 'a' }),
        (error) => error === boom,
      )
      const next = await b.lease(job, 60_000, () => 'b', { table, holder: 'b' })
      assert.equal(next.ran, driver.transactional === true)
    })

    test('a schema-qualified table is claimed in that schema', async () => {
      const [a, b] = [await claimant(), await claimant()]
      const schema = unique('sch')
      const qualified = `${schema}.leases`
      await env.admin.query(`CREATE SCHEMA "${schema}"`, [])
      await env.admin.query(createTableSql(qualified), [])
      const job = unique('job')
      assert.equal((await a.lease(job, 60_000, () => 1, { table: qualified, holder: 'a' })).ran, true)
      assert.equal((await b.lease(job, 60_000, () => 2, { table: qualified, holder: 'b' })).ran, false)
      const held = await env.admin.query(`SELECT holder FROM ${quoteTable(qualified)} WHERE job_name = $1`, [job])
      assert.deepEqual(rowsOf(held), [{ holder: 'a' }])
      const elsewhere = await env.admin.query(`SELECT count(*)::int AS n FROM ${t} WHERE job_name = $1`, [job])
      assert.deepEqual(rowsOf(elsewhere), [{ n: 0 }])
    })
  })
}
