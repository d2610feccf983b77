/**
 * Occurrence-keyed claims on real Postgres: a claim that names its occurrence wins only while the
 * lease is free and no claim of that occurrence or a later one was made, and never for an
 * occurrence ahead of the database clock. What a replica is told of its schedule (`ctx.occurrence`,
 * `ctx.missed`), a mixed fleet on one table, what declares a job's interval, and that a losing
 * keyed claim writes nothing.
 *
 * Occurrences are set in the past (whole minutes), so each test names its own schedule without
 * waiting for one; a fast replica's occurrence is set ahead of the database clock.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { plainUpsertSql } from '../../../dev/peers.ts'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import {
  forInterval,
  type LeaseOptions,
  leasedTick,
  leaseForInterval,
  listLeases,
  quoteTable,
  withCronLease,
} from '../../../src/index.ts'
import { asAnotherProcess, collectingLogger, shuffled } from '../../helpers/occurrence-replicas.ts'
import { writeCost } from '../../helpers/write-cost.ts'

const MINUTE = 60_000
const LEASE_MS = 50_000

let pool: pg.Pool
before(async () => {
  pool = await testPool()
})
after(() => pool.end())

/** A whole minute `minutesAgo` minutes before this one. */
const minutesAgo = (minutes: number) => new Date((Math.floor(Date.now() / MINUTE) - minutes) * MINUTE)

/** The job's row as the database has it, the timestamps as ms since the epoch. */
async function rowOf(table: string, job: string) {
  const { rows } = await pool.query(
    `SELECT holder, (extract(epoch FROM claimed_at) * 1000)::float8 AS claimed_ms,
       (extract(epoch FROM lease_until) * 1000)::float8 AS until_ms,
       (extract(epoch FROM last_occurrence) * 1000)::float8 AS occurrence_ms,
       (extract(epoch FROM next_due_at) * 1000)::float8 AS next_due_ms,
       every_ms, last_missed::int AS last_missed, missed_occurrences::int AS missed_total,
       claimed_at::text AS token
     FROM ${quoteTable(table)} WHERE job_name = $1`,
    [job],
  )
  return rows[0] as
    | {
        holder: string
        claimed_ms: number
        until_ms: number
        occurrence_ms: number | null
        next_due_ms: number | null
        every_ms: number | null
        last_missed: number | null
        missed_total: number | null
        token: string
      }
    | undefined
}

/** Claims `job` for `occurrence` as `holder`: whether the tick ran. */
async function claimFor(
  table: string,
  job: string,
  holder: string,
  occurrence: Date | string,
  opts: LeaseOptions = {},
) {
  let ran = 0
  const outcome = await withCronLease(pool, job, LEASE_MS, () => void ran++, { table, holder, occurrence, ...opts })
  assert.equal(ran, outcome.ran ? 1 : 0, 'the tick ran exactly when the outcome says so')
  return outcome.ran
}

describe('a late replica never runs an occurrence that already ran', () => {
  test('after the lease expired, the occurrence that ran and earlier ones lose, and the next one wins', async () => {
    const table = await freshTable(pool, 'late')
    const job = 'late:report'
    const ran = minutesAgo(10)
    assert.equal(await claimFor(table, job, 'on-time', ran), true)
    await expireLease(pool, table, job)
    const before = await rowOf(table, job)

    assert.equal(await claimFor(table, job, 'late', ran), false, 'the same occurrence, presented late')
    assert.equal(await claimFor(table, job, 'later', new Date(ran.getTime() - MINUTE)), false, 'an earlier one')
    assert.deepEqual(await rowOf(table, job), before, 'the losers wrote nothing')
    assert.equal(await claimFor(table, job, 'next', new Date(ran.getTime() + MINUTE)), true, 'the next occurrence')
  })

  test('a replica that has not yet learnt the table has occurrence columns keeps to the keys others wrote', async () => {
    const table = await freshTable(pool, 'late')
    const job = 'late:fresh-process'
    const ran = minutesAgo(10)
    assert.equal(await claimFor(table, job, 'on-time', ran), true)
    await expireLease(pool, table, job)
    // Its first claims go out before any reply told it the table's shape.
    const fresh = asAnotherProcess(table)
    assert.equal(await claimFor(fresh, job, 'late', ran), false)
    assert.equal(await claimFor(fresh, job, 'late', new Date(ran.getTime() - MINUTE)), false)
    assert.equal(await claimFor(fresh, job, 'late', new Date(ran.getTime() + MINUTE)), true)
    assert.equal((await rowOf(table, job))?.occurrence_ms, ran.getTime() + MINUTE, 'its win keyed the row')
  })

  test('ten late replicas racing an occurrence that ran, on both statements: none runs it', async () => {
    const table = await freshTable(pool, 'late')
    const job = 'late:race'
    const ran = minutesAgo(5)
    assert.equal(await claimFor(table, job, 'on-time', ran), true)
    for (let round = 0; round < 5; round++) {
      await expireLease(pool, table, job)
      const outcomes = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          claimFor(i % 2 === 0 ? table : asAnotherProcess(table), job, `late-${i}`, i < 5 ? ran : minutesAgo(6 + i)),
        ),
      )
      assert.deepEqual(outcomes.filter(Boolean), [], `round ${round}: no late replica ran`)
    }
  })

  test('ten replicas racing a new occurrence after the lease expired: exactly one runs it', async () => {
    const table = await freshTable(pool, 'late')
    const job = 'late:fresh-race'
    for (let round = 0; round < 10; round++) {
      if (round > 0) await expireLease(pool, table, job)
      const occurrence = minutesAgo(20 - round)
      const outcomes = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          claimFor(i % 2 === 0 ? table : asAnotherProcess(table), job, `r${i}`, occurrence),
        ),
      )
      assert.equal(outcomes.filter(Boolean).length, 1, `round ${round}`)
    }
  })

  test('the same instant written in another zone is the same occurrence', async () => {
    const table = await freshTable(pool, 'late')
    const job = 'late:zones'
    const ran = minutesAgo(3)
    assert.equal(await claimFor(table, job, 'utc', ran.toISOString()), true)
    await expireLease(pool, table, job)
    const inKolkata = new Date(ran.getTime() + 5.5 * 3_600_000).toISOString().replace('Z', '+05:30')
    assert.equal(Date.parse(inKolkata), ran.getTime())
    assert.equal(await claimFor(table, job, 'kolkata', inKolkata), false)
  })
})

describe('a replica whose clock runs fast never runs early', () => {
  test('an occurrence minutes ahead of the database clock never wins a free lease, and writes nothing', async () => {
    const table = await freshTable(pool, 'fast')
    const job = 'fast:alone'
    const { logger, warns } = collectingLogger()
    for (let tick = 0; tick < 5; tick++) {
      // What a scheduler three minutes fast names as its current occurrence, tick after tick.
      const occurrence = new Date(Date.now() + 3 * MINUTE + tick * MINUTE)
      assert.equal(await claimFor(table, job, 'fast', occurrence, { logger }), false, `tick ${tick}`)
    }
    assert.equal(await rowOf(table, job), undefined, 'no row was written')
    assert.equal(warns.length, 1, `one warning for the job, not one a tick: ${JSON.stringify(warns)}`)
    assert.match(warns[0]!, /'fast:alone' did not run its occurrence .* ahead of the database clock/)
  })

  test('in a fleet, the fast replica never wins, never blocks the others, and warns once per job', async () => {
    const table = await freshTable(pool, 'fast')
    const { logger, warns } = collectingLogger()
    const jobs = ['fast:fleet-a', 'fast:fleet-b']
    for (let round = 0; round < 6; round++) {
      for (const job of jobs) {
        if (round > 0) await expireLease(pool, table, job)
        // The others' clocks are right, so they name an occurrence that has come; the fast one, its
        // own process, names the one its clock has reached.
        const [onTime, fast] = await Promise.all([
          claimFor(table, job, 'on-time', minutesAgo(30 - round)),
          claimFor(asAnotherProcess(table), job, 'fast', new Date(Date.now() + 5 * MINUTE), { logger }),
        ])
        assert.deepEqual({ onTime, fast }, { onTime: true, fast: false }, `${job}, round ${round}`)
      }
    }
    assert.deepEqual(
      warns.map((w) => jobs.find((job) => w.includes(`'${job}'`))),
      jobs,
      `one warning for each job: ${JSON.stringify(warns)}`,
    )
  })

  test("a fast replica's refused claim locks nothing: inside its caller's open transaction, an on-time replica still wins", async () => {
    const table = await freshTable(pool, 'fast')
    const job = 'fast:in-transaction'
    assert.equal(await claimFor(table, job, 'on-time', minutesAgo(20)), true)
    await expireLease(pool, table, job)
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      const fast = await withCronLease(client, job, LEASE_MS, () => {}, {
        table: asAnotherProcess(table),
        holder: 'fast',
        occurrence: new Date(Date.now() + 5 * MINUTE),
        logger: collectingLogger().logger,
      })
      assert.equal(fast.ran, false)
      // Whatever the refused claim locked stays locked until this transaction ends.
      assert.equal(await claimFor(table, job, 'on-time', minutesAgo(19)), true, 'the row was not left locked')
      await client.query('COMMIT')
    } finally {
      // Closed, not returned: a failed assertion must not leave the pool a client inside a transaction.
      client.release(true)
    }
  })

  test('an occurrence ahead by less than the tolerance wins; by more, or with no tolerance, it does not', async () => {
    const table = await freshTable(pool, 'fast')
    const quiet = collectingLogger().logger
    // The default tolerance is 10% of the 50 s lease: 5 s.
    assert.equal(await claimFor(table, 'fast:within', 'a', new Date(Date.now() + 1_000), { logger: quiet }), true)
    assert.equal(await claimFor(table, 'fast:beyond', 'a', new Date(Date.now() + 30_000), { logger: quiet }), false)
    const strict = { logger: quiet, clockToleranceMs: 0 }
    assert.equal(await claimFor(table, 'fast:strict', 'a', new Date(Date.now() + 1_000), strict), false)
    const loose = { logger: quiet, clockToleranceMs: 60_000 }
    assert.equal(await claimFor(table, 'fast:loose', 'a', new Date(Date.now() + 30_000), loose), true)
  })
})

describe('ctx.occurrence and ctx.missed on normal runs', () => {
  /** Claims and returns what the tick was told, or null when it lost. */
  async function told(table: string, job: string, opts: LeaseOptions) {
    const outcome = await withCronLease(
      pool,
      job,
      LEASE_MS,
      (ctx) => ({ occurrence: ctx.occurrence?.getTime() ?? null, missed: ctx.missed }),
      { table, ...opts },
    )
    await expireLease(pool, table, job)
    return outcome.ran ? outcome.result : null
  }

  test('at a fixed interval: each run is told its occurrence, and one skipped occurrence is one missed', async () => {
    const table = await freshTable(pool, 'missed')
    const job = 'missed:every-minute'
    const base = minutesAgo(30).getTime()
    const at = (n: number) => ({ occurrence: new Date(base + n * MINUTE), everyMs: MINUTE })
    assert.deepEqual(await told(table, job, at(0)), { occurrence: base, missed: 0 }, 'the first run')
    assert.deepEqual(await told(table, job, at(1)), { occurrence: base + MINUTE, missed: 0 }, 'the next')
    assert.deepEqual(await told(table, job, at(3)), { occurrence: base + 3 * MINUTE, missed: 1 }, 'one skipped')
    assert.deepEqual(await told(table, job, at(7)), { occurrence: base + 7 * MINUTE, missed: 3 }, 'three skipped')
    const row = await rowOf(table, job)
    assert.equal(row?.last_missed, 3)
    assert.equal(row?.missed_total, 4, 'the total counts every skipped occurrence once')
    const listed = (await listLeases(pool, { table })).find((l) => l.jobName === job)
    assert.equal(listed?.missed, 4)
    assert.equal(listed?.lastOccurrence && Date.parse(listed.lastOccurrence), base + 7 * MINUTE)
  })

  test("with the scheduler's next occurrence instead of an interval, the gap between them counts", async () => {
    const table = await freshTable(pool, 'missed')
    const job = 'missed:cron'
    const base = minutesAgo(60).getTime()
    const every = 5 * MINUTE
    const at = (n: number) => ({
      occurrence: new Date(base + n * every),
      nextOccurrence: new Date(base + (n + 1) * every),
    })
    assert.deepEqual(await told(table, job, at(0)), { occurrence: base, missed: 0 })
    assert.deepEqual(await told(table, job, at(2)), { occurrence: base + 2 * every, missed: 1 })
    assert.deepEqual(await told(table, job, at(3)), { occurrence: base + 3 * every, missed: 0 })
  })

  test('leasedTick passes an occurrence given by hand through to the tick', async () => {
    const table = await freshTable(pool, 'missed')
    const job = 'missed:by-hand'
    const base = minutesAgo(40).getTime()
    const tick = leasedTick(pool, job, LEASE_MS, (ctx) => [ctx.occurrence?.getTime(), ctx.missed], {
      table,
      everyMs: MINUTE,
    })
    assert.deepEqual(await tick({ occurrence: new Date(base) }), { ran: true, result: [base, 0] })
    await expireLease(pool, table, job)
    assert.deepEqual(await tick({ occurrence: new Date(base + 2 * MINUTE) }), {
      ran: true,
      result: [base + 2 * MINUTE, 1],
    })
    await expireLease(pool, table, job)
    assert.deepEqual(await tick({ occurrence: new Date(base + 2 * MINUTE) }), { ran: false, result: null })
  })

  test('without an occurrence the run is told none, and nothing missed', async () => {
    const table = await freshTable(pool, 'missed')
    assert.deepEqual(await told(table, 'missed:lease-only', {}), { occurrence: null, missed: 0 })
  })
})

describe('a mixed fleet on one table: keyed, lease-only and the original package claim together', () => {
  test('4 keyed, 4 lease-only and 4 original claimants race each round, 40 rounds: exactly one winner a round', async (t) => {
    const table = await freshTable(pool, 'mixedocc')
    const job = 'mixed:occurrence'
    const wins = { keyed: 0, leaseOnly: 0, original: 0 }
    const quiet = collectingLogger().logger
    for (let round = 0; round < 40; round++) {
      if (round > 0) await expireLease(pool, table, job)
      const occurrence = minutesAgo(100 - round)
      const claimant = (kind: keyof typeof wins, i: number) => async () => {
        const holder = `${kind}-${i}`
        let won: boolean
        if (kind === 'original') won = (await pool.query(plainUpsertSql(table), [job, LEASE_MS, holder])).rowCount === 1
        else {
          // Half the keyed claimants send the probing claim, as a replica just started does.
          const keyedOn = i % 2 === 0 ? table : asAnotherProcess(table)
          const opts =
            kind === 'keyed' ? { table: keyedOn, holder, occurrence, logger: quiet } : { table, holder, logger: quiet }
          won = (await withCronLease(pool, job, LEASE_MS, () => {}, opts)).ran
        }
        return won ? [{ kind, holder }] : []
      }
      const claimants = (['keyed', 'leaseOnly', 'original'] as const).flatMap((kind) =>
        [0, 1, 2, 3].map((i) => claimant(kind, i)),
      )
      const winners = (await Promise.all(shuffled(claimants).map((claim) => claim()))).flat()
      assert.equal(winners.length, 1, `round ${round}: ${JSON.stringify(winners)}`)
      assert.equal((await rowOf(table, job))?.holder, winners[0]!.holder, `round ${round}: the row names the winner`)
      wins[winners[0]!.kind]++
    }
    t.diagnostic(`rounds won: ${JSON.stringify(wins)}`)
  })

  test('a keyed occurrence stays run after lease-only and original claimants took later leases', async () => {
    const table = await freshTable(pool, 'mixedocc')
    const job = 'mixed:key-kept'
    const ran = minutesAgo(10)
    assert.equal(await claimFor(table, job, 'keyed', ran), true)
    await expireLease(pool, table, job)
    assert.equal((await withCronLease(pool, job, LEASE_MS, () => {}, { table, holder: 'lease-only' })).ran, true)
    await expireLease(pool, table, job)
    assert.equal((await pool.query(plainUpsertSql(table), [job, LEASE_MS, 'original'])).rowCount, 1)
    await expireLease(pool, table, job)
    assert.equal(await claimFor(table, job, 'late', ran), false)
    assert.equal(await claimFor(table, job, 'next', new Date(ran.getTime() + MINUTE)), true)
  })
})

describe("a job's interval is what its own call declares", () => {
  test('after leaseForInterval(15_000), a job on a raw 12,000 ms lease run every 60 s is not taken to run every 15 s', async () => {
    const table = await freshTable(pool, 'interval')
    const job = 'interval:raw-lease'
    assert.equal(leaseForInterval(15_000), 12_000)
    const quoted = quoteTable(table)
    assert.equal((await withCronLease(pool, job, 12_000, () => {}, { table })).ran, true)
    assert.equal((await rowOf(table, job))?.every_ms, null, 'no interval is known after one run')

    // The next run a minute later: the previous run's start moved back by 60 s.
    await pool.query(
      `UPDATE ${quoted} SET last_started_at = last_started_at - interval '60 seconds', lease_until = clock_timestamp() - interval '1 second' WHERE job_name = $1`,
      [job],
    )
    assert.equal((await withCronLease(pool, job, 12_000, () => {}, { table })).ran, true)
    const every = (await rowOf(table, job))?.every_ms
    assert.ok(every != null && every >= 60_000 && every < 90_000, `observed ${every}`)

    // 35 s after that run: past two intervals of 15 s, well inside one of 60 s.
    await pool.query(
      `UPDATE ${quoted} SET claimed_at = claimed_at - interval '35 seconds', last_started_at = last_started_at - interval '35 seconds' WHERE job_name = $1`,
      [job],
    )
    const listed = (await listLeases(pool, { table })).find((l) => l.jobName === job)
    assert.equal(listed?.overdue, false)
    assert.equal(listed?.everyMs, every)
  })

  test('leasedTick on the same raw lease is not given the interval either', async () => {
    const table = await freshTable(pool, 'interval')
    leaseForInterval(15_000)
    await leasedTick(pool, 'interval:leased-tick', 12_000, () => {}, { table })()
    assert.equal((await rowOf(table, 'interval:leased-tick'))?.every_ms, null)
  })

  test('forInterval(15_000) declares both: a 12 s lease, and the job due again 15 s on', async () => {
    const table = await freshTable(pool, 'interval')
    const job = 'interval:declared'
    assert.deepEqual(forInterval(15_000), { leaseMs: 12_000, everyMs: 15_000 })
    assert.equal((await withCronLease(pool, job, forInterval(15_000), () => {}, { table })).ran, true)
    const row = (await rowOf(table, job))!
    assert.equal(Math.round(row.until_ms - row.claimed_ms), 12_000)
    assert.equal(row.every_ms, 15_000)
    // Due one interval after the claim, carried from this process's clock as a duration.
    assert.ok(
      Math.abs(row.next_due_ms! - row.claimed_ms - 15_000) < 1_000,
      `due ${row.next_due_ms! - row.claimed_ms} ms on`,
    )

    const occurrence = minutesAgo(2)
    await expireLease(pool, table, job)
    const told = await withCronLease(pool, job, forInterval(15_000), (ctx) => ctx.occurrence?.getTime(), {
      table,
      occurrence,
    })
    assert.deepEqual(told, { ran: true, result: occurrence.getTime() })
    const due = (await rowOf(table, job))?.next_due_ms ?? Number.NaN
    // Two minutes after now + 15 s would be; within a round trip of the occurrence + 15 s.
    assert.ok(Math.abs(due - occurrence.getTime() - 15_000) < 10_000, `due ${due - occurrence.getTime()} ms after it`)
  })
})

// Ten losses a sample, eight samples: the keyed cases are many, each is short.
const cost = (lose: () => Promise<unknown>, losses = 10) => writeCost(pool, lose, { losses, samples: 8 })

describe('a losing keyed claim writes nothing', () => {
  const ran = minutesAgo(10)
  const losses = [
    ['the lease is held', 'held', () => new Date(ran.getTime() + MINUTE)],
    ['the occurrence already ran', 'expired', () => ran],
    ['the occurrence is an earlier one', 'expired', () => new Date(ran.getTime() - MINUTE)],
    ['the occurrence is too early', 'expired', () => new Date(Date.now() + 10 * MINUTE)],
  ] as const

  for (const statement of ['keyed', 'probing'] as const) {
    for (const [why, lease, occurrence] of losses) {
      test(`${why} (${statement} claim): no transaction ID, no WAL`, async () => {
        const table = await freshTable(pool, 'losingocc')
        const job = 'losing:occurrence'
        assert.equal(await claimFor(table, job, 'winner', ran), true)
        if (lease === 'expired') await expireLease(pool, table, job)
        // A replica that has not yet learnt the table's shape sends the probing claim.
        const claimsOn = statement === 'keyed' ? table : asAnotherProcess(table)
        const quiet = collectingLogger().logger
        const lose = async () =>
          assert.equal(await claimFor(claimsOn, job, 'loser', occurrence(), { logger: quiet }), false)
        await lose()
        const before = await rowOf(table, job)
        assert.deepEqual(await cost(lose), { xidsPerLoss: 0, walBytesPerLoss: 0 })

        // Inside a caller's transaction nothing assigns it a transaction ID either.
        const client = await pool.connect()
        try {
          await client.query('BEGIN')
          const outcome = await withCronLease(client, job, LEASE_MS, () => {}, {
            table: claimsOn,
            holder: 'loser',
            occurrence: occurrence(),
            logger: quiet,
          })
          assert.equal(outcome.ran, false)
          const { rows } = await client.query('SELECT txid_current_if_assigned()::text AS xid')
          assert.equal(rows[0].xid, null, 'no transaction ID was assigned')
          await client.query('COMMIT')
        } finally {
          // Closed, not returned: a failed assertion must not leave the pool a client inside a transaction.
          client.release(true)
        }
        assert.deepEqual(await rowOf(table, job), before, 'the row is as it was')
      })
    }
  }
})
