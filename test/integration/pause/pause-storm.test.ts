/**
 * A pause ends, but never a running claim's own lease: pauseJob and resumeJob change when the job
 * is next claimable, and only releaseLease can let a rival in while a claim's lease still runs.
 * Shown one step at a time, then under a storm of admin callers and claimants on one job.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { listLeases, pauseJob, releaseLease, resumeJob, withCronLease } from '../../../src/index.ts'
import { holdClaim } from '../../helpers/held-claim.ts'

let operator: pg.Pool
let tickPool: pg.Pool
let rivalPool: pg.Pool
let table: string
let job = 0
const nextJob = () => `storm-${++job}`

before(async () => {
  operator = await testPool({ max: 20 })
  tickPool = await testPool({ max: 10 })
  rivalPool = await testPool({ max: 10 })
  table = await freshTable(operator, 'storm')
})
after(async () => {
  await Promise.all([operator.end(), tickPool.end(), rivalPool.end()])
})

/** One claim by a rival replica on its own pool: its claim token if its tick ran, else null. */
async function rivalClaim(jobName: string): Promise<string | null> {
  const outcome = await withCronLease(rivalPool, jobName, 60_000, (ctx) => ctx.claimToken, { table, holder: 'rival' })
  return outcome.ran ? outcome.result : null
}

const leaseOf = async (jobName: string) => (await listLeases(operator, { table })).find((l) => l.jobName === jobName)!

/**
 * Claims again and again until a rival wins; resolves its claim token (database clock). Bounded,
 * so a lease that never ends fails the test instead of hanging it.
 */
async function rivalWinsEventually(jobName: string, withinMs = 5000): Promise<string> {
  const deadline = performance.now() + withinMs
  while (performance.now() < deadline) {
    const token = await rivalClaim(jobName)
    if (token !== null) return token
    await sleep(10)
  }
  assert.fail(`no rival claim of ${jobName} ran within ${withinMs} ms`)
}

/** Whether a promise has settled, without waiting for it. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  const pending = Symbol('pending')
  return (await Promise.race([promise.then(() => true), sleep(0, pending)])) !== pending
}

// Claim tokens and lease ends share one ISO text format with microseconds (UTC, `Z`), so as text
// they compare in time order.
const notBefore = (later: string, earlier: string, what: string) =>
  assert.ok(later >= earlier, `${what}: ${later} is before ${earlier}`)

describe("a pause ends, but never a running claim's own lease", () => {
  test("pause then resume: a rival loses until the running claim's own lease ends by the database clock", async () => {
    const jobName = nextJob()
    const tick = await holdClaim(tickPool, jobName, 1500, { table, holder: 'tick' })
    const claimed = await leaseOf(jobName)
    assert.equal(claimed.claimedAt, tick.ctx.claimToken)

    await pauseJob(operator, jobName, { table })
    assert.equal((await leaseOf(jobName)).paused, true)
    assert.equal(await rivalClaim(jobName), null, 'paused')
    await resumeJob(operator, jobName, { table })
    const resumed = await leaseOf(jobName)
    assert.equal(resumed.paused, false)
    assert.equal(resumed.leaseUntil, claimed.leaseUntil, 'resume gives the claim back its own end, to the microsecond')
    assert.equal(await rivalClaim(jobName), null, 'the claim still holds its lease right after resume')
    await sleep(300)
    assert.equal(await rivalClaim(jobName), null, 'and a few hundred ms later')

    const stillHeld = await leaseOf(jobName)
    assert.ok(stillHeld.held && stillHeld.remainingMs > 0, 'the tick is let go while its lease still holds')
    tick.release()
    await tick.outcome
    notBefore(await rivalWinsEventually(jobName), claimed.leaseUntil, "the rival's claim comes after the lease ends")
  })

  test("a shorter pause replacing an open-ended one runs out, and the claim's own lease still holds after it", async () => {
    const jobName = nextJob()
    const tick = await holdClaim(tickPool, jobName, 1500, { table, holder: 'tick' })
    const claimed = await leaseOf(jobName)

    await pauseJob(operator, jobName, { table })
    await pauseJob(operator, jobName, { table, forMs: 200 })
    const shorter = await leaseOf(jobName)
    assert.equal(shorter.paused, true)
    assert.notEqual(shorter.pausedUntil, 'infinity', 'the open-ended pause was replaced')
    assert.equal(shorter.leaseUntil, claimed.leaseUntil, "the claim's own end outlasts the 200 ms pause")
    assert.equal(await rivalClaim(jobName), null, 'paused')
    await sleep(300)
    const over = await leaseOf(jobName)
    assert.equal(over.paused, false, 'the 200 ms pause ran out')
    assert.ok(over.held, 'the lease is still held')
    assert.equal(over.leaseUntil, claimed.leaseUntil)
    assert.equal(await rivalClaim(jobName), null, "the claim's own lease still holds after the pause")

    tick.release()
    await tick.outcome
    notBefore(await rivalWinsEventually(jobName), claimed.leaseUntil, "the rival's claim comes after the lease ends")
  })

  test('release during a running tick lets a rival win while the first tick still runs (the documented exception)', async () => {
    const jobName = nextJob()
    const tick = await holdClaim(tickPool, jobName, 60_000, { table, holder: 'tick' })
    assert.equal(await rivalClaim(jobName), null)
    await releaseLease(operator, jobName, { table })
    assert.notEqual(await rivalClaim(jobName), null, 'a rival wins at once')
    assert.equal(await settled(tick.outcome), false, 'while the first tick is still running')
    tick.release()
    assert.equal((await tick.outcome).ran, true)
  })

  test("release during a pause ends the claim's own lease too: the resume that follows does not give it back", async () => {
    const jobName = nextJob()
    const tick = await holdClaim(tickPool, jobName, 60_000, { table, holder: 'tick' })
    await pauseJob(operator, jobName, { table })
    await releaseLease(operator, jobName, { table })
    assert.equal(await rivalClaim(jobName), null, 'release does not lift the pause')
    await resumeJob(operator, jobName, { table })
    assert.notEqual(await rivalClaim(jobName), null, 'claimable at once after resume')
    assert.equal(await settled(tick.outcome), false, 'while the first tick is still running')
    tick.release()
    await tick.outcome
  })
})

// The storm. All claimants run in this process, so two runs that overlap in its monotonic clock
// (performance.now()) overlapped for real; the database clock is needed only for the lease ends.
// The storm lasts at least STORM_MS, and on until it has made every situation the verdict needs
// (see `coverage`), at most MAX_STORM_MS. How many runs fit in a while depends on how the random
// pauses fall and on the machine's load, so a fixed length would make the counts a coin toss.
const STORM_MS = 7000
const MAX_STORM_MS = 40_000
const CLAIMANTS = 18
const ADMINS = 20
const MIN_LEASE_MS = 80
const MAX_LEASE_MS = 300
// A tick ends at most this share of its lease after its claim was sent: the lease is measured
// from when the claim ran, which is after it was sent, so the tick ends well inside it.
const TICK_SHARE = 0.4

interface Run {
  holder: string
  token: string | null
  leaseMs: number
  /** When the claim was sent, the tick started and the tick ended: process-monotonic ms. */
  sent: number
  start: number
  end: number
}

interface AdminOp {
  kind: AdminKind
  sent: number
  replied: number
}

interface Attempt {
  sent: number
  replied: number
}

type AdminKind = 'pause-for' | 'pause-until' | 'pause-open' | 'resume' | 'release'

const randomInt = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1))

/**
 * Each admin caller's operations, weighted by how often one is picked. Release is rare: every
 * overlap it allows is excused, and frequent ones would hide an overlap of another cause.
 */
const ADMIN_KINDS: readonly { kind: AdminKind; weight: number; act: (jobName: string) => Promise<unknown> }[] = [
  { kind: 'pause-for', weight: 30, act: (j) => pauseJob(operator, j, { table, forMs: randomInt(50, 400) }) },
  {
    kind: 'pause-until',
    weight: 20,
    // The end is read from this process's clock, the same machine's as the database's; 150 ms
    // ahead leaves room for the event loop's lag before the statement runs.
    act: (j) => pauseJob(operator, j, { table, until: new Date(Date.now() + randomInt(150, 400)) }),
  },
  { kind: 'pause-open', weight: 12, act: (j) => pauseJob(operator, j, { table }) },
  { kind: 'resume', weight: 34, act: (j) => resumeJob(operator, j, { table }) },
  { kind: 'release', weight: 4, act: (j) => releaseLease(operator, j, { table }) },
]

function pickKind() {
  const total = ADMIN_KINDS.reduce((sum, k) => sum + k.weight, 0)
  let roll = Math.random() * total
  for (const kind of ADMIN_KINDS) {
    roll -= kind.weight
    if (roll < 0) return kind
  }
  return ADMIN_KINDS[ADMIN_KINDS.length - 1]!
}

interface Storm {
  over: boolean
}

async function claimant(pool: pg.Pool, jobName: string, holder: string, storm: Storm, runs: Run[], lost: Attempt[]) {
  while (!storm.over) {
    const leaseMs = randomInt(MIN_LEASE_MS, MAX_LEASE_MS)
    const sent = performance.now()
    let run: Run | undefined
    await withCronLease(
      pool,
      jobName,
      leaseMs,
      async (ctx) => {
        const start = performance.now()
        run = { holder, token: ctx.claimToken, leaseMs, sent, start, end: Number.NaN }
        await sleep((0.5 + Math.random() / 2) * Math.max(0, sent + TICK_SHARE * leaseMs - start))
        run.end = performance.now()
      },
      { table, holder },
    )
    if (run) runs.push(run)
    else lost.push({ sent, replied: performance.now() })
    await sleep(randomInt(5, 20))
  }
}

async function admin(jobName: string, storm: Storm, ops: AdminOp[], refused: AdminOp[]) {
  while (!storm.over) {
    await sleep(randomInt(50, 300))
    if (storm.over) break
    const { kind, act } = pickKind()
    const sent = performance.now()
    try {
      await act(jobName)
      ops.push({ kind, sent, replied: performance.now() })
    } catch (error) {
      // Only an end of pause that the database clock had already passed may be refused.
      if (kind !== 'pause-until' || !/a time in the future by the database clock/.test(String(error))) throw error
      refused.push({ kind, sent, replied: performance.now() })
    }
  }
}

/**
 * The time within which run `a` alone may run: from its start to its end, but no later than its
 * lease's earliest possible end (the claim ran after it was sent). A tick delayed past that by
 * the event loop is no longer protected, and nor is anything after it.
 */
const protectedUntil = (run: Run) => Math.min(run.end, run.sent + run.leaseMs)

/**
 * Pairs of runs where the later one started while the earlier one's lease still protected it. A
 * run's claim ran somewhere between its `sent` and its `start`, so when B starts inside A's
 * protected time (and inside its own), one of the two claims won while the other's lease held.
 * Excused when a release may have run between the two claims: its window meets theirs.
 */
function overlaps(runs: Run[], ops: AdminOp[]) {
  const releases = ops.filter((op) => op.kind === 'release')
  const sorted = [...runs].sort((x, y) => x.start - y.start)
  const excused: [Run, Run][] = []
  const unexcused: [Run, Run][] = []
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i]!
    for (let j = i + 1; j < sorted.length && sorted[j]!.start < protectedUntil(a); j++) {
      const b = sorted[j]!
      if (b.start >= b.sent + b.leaseMs) continue
      const from = Math.min(a.sent, b.sent)
      const between = releases.some((r) => r.replied > from && r.sent < b.start)
      ;(between ? excused : unexcused).push([a, b])
    }
  }
  return { excused, unexcused }
}

/** Operations of `kind` that were sent and answered while some run was in flight. */
const landedDuringRuns = (ops: AdminOp[], runs: Run[], kind: AdminKind) =>
  ops.filter((op) => op.kind === kind && runs.some((run) => run.start < op.sent && op.replied < run.end))

/**
 * What the storm must have made for its verdict to say something, and how many of each. A run
 * that outlived its lease (a loaded machine) is still judged over the part its lease protected, so
 * no share of such runs is required, only enough runs that stayed inside theirs.
 */
const NEEDED = {
  runsInsideTheirLease: 25,
  pausesDuringRuns: 20,
  resumesDuringRuns: 20,
  claimsLostAfterSuchAResume: 20,
  releases: 3,
}

/** How many of each needed situation the storm has made so far. */
function coverage(runs: Run[], ops: AdminOp[], lost: Attempt[]): typeof NEEDED {
  const resumes = landedDuringRuns(ops, runs, 'resume')
  // The moments the property is about: a claim sent after a resume landed during a run, and
  // answered while that run was still protected. Each had to lose.
  const windows = runs.flatMap((run) => {
    const during = resumes.filter((resume) => run.start < resume.sent && resume.replied < run.end)
    return during.length ? [{ from: Math.min(...during.map((r) => r.replied)), to: protectedUntil(run) }] : []
  })
  return {
    runsInsideTheirLease: runs.filter((run) => run.end <= run.sent + run.leaseMs).length,
    pausesDuringRuns: ADMIN_KINDS.filter((k) => k.kind.startsWith('pause')).flatMap((k) =>
      landedDuringRuns(ops, runs, k.kind),
    ).length,
    resumesDuringRuns: resumes.length,
    claimsLostAfterSuchAResume: lost.filter((a) => windows.some((w) => w.from < a.sent && a.replied < w.to)).length,
    releases: ops.filter((op) => op.kind === 'release').length,
  }
}

const shortfalls = (made: typeof NEEDED) =>
  Object.entries(NEEDED)
    .filter(([what, needed]) => made[what as keyof typeof NEEDED] < needed)
    .map(([what, needed]) => `${what}: ${made[what as keyof typeof NEEDED]} of ${needed}`)

describe('a storm of pauses, resumes and releases on one job', () => {
  test('18 claimants and 20 admin callers for 7 s or more: two runs overlap only when a release came between them', {
    timeout: MAX_STORM_MS + 20_000,
  }, async (t) => {
    const jobName = nextJob()
    const pools = [tickPool, rivalPool, operator]
    const runs: Run[] = []
    const lost: Attempt[] = []
    const ops: AdminOp[] = []
    const refused: AdminOp[] = []
    const storm: Storm = { over: false }
    const began = performance.now()
    const watch = async () => {
      while (!storm.over) {
        await sleep(500)
        const elapsed = performance.now() - began
        storm.over = elapsed >= MAX_STORM_MS || (elapsed >= STORM_MS && !shortfalls(coverage(runs, ops, lost)).length)
      }
    }
    // A claimant or admin call that throws ends the storm for all, not only the test.
    await Promise.all([
      watch(),
      ...Array.from({ length: CLAIMANTS }, (_, i) =>
        claimant(pools[i % 2]!, jobName, `claimant-${i}`, storm, runs, lost),
      ),
      ...Array.from({ length: ADMINS }, () => admin(jobName, storm, ops, refused)),
    ]).finally(() => {
      storm.over = true
    })

    const { excused, unexcused } = overlaps(runs, ops)
    const made = coverage(runs, ops, lost)
    const count = (kind: AdminKind) => ops.filter((op) => op.kind === kind).length
    t.diagnostic(
      `${((performance.now() - began) / 1000).toFixed(1)} s; runs ${runs.length}, lost claims ${lost.length}; ` +
        `admin ops ${ops.length} (${ADMIN_KINDS.map((k) => `${k.kind} ${count(k.kind)}`).join(', ')}), ` +
        `refused ${refused.length}`,
    )
    t.diagnostic(`made: ${JSON.stringify(made)}`)
    t.diagnostic(`overlapping pairs: ${excused.length} after a release, ${unexcused.length} without one`)

    const describePair = ([a, b]: [Run, Run]) =>
      `${a.holder} (claim ${a.token}, ${a.leaseMs} ms) and ${b.holder} (claim ${b.token}) ` +
      `overlap by ${(protectedUntil(a) - b.start).toFixed(1)} ms`
    assert.deepEqual(
      unexcused.slice(0, 5).map(describePair),
      [],
      `${unexcused.length} overlaps with no release between`,
    )
    // The storm must have made the situations the property is about, or the verdict says nothing.
    assert.deepEqual(shortfalls(made), [], `the storm made too few of these in ${MAX_STORM_MS} ms`)
  })
})
