/**
 * `npm run bench:shapes [-- --pg 14|18] [--jobs N] [--rounds N] [--quick]`: claim shapes the library does
 * not send, measured raw (prepared, no library around them) beside the one it does, for
 * docs/performance.md ("How far the fleet targets are"). Not part of `npm run bench`: its
 * figures are the statements' alone, so they read higher than the bench's library rows.
 *
 * - `library`: the library's rule: the probe, then the claim; after a claim the probe did not
 *   stop, the next three claims without it.
 * - `guarded function`: one statement that reads the row and, only when the lease is free and
 *   the occurrence unclaimed, calls a claim function (made here): `SKIP LOCKED` on the row, then
 *   the library's claim `INSERT`. A loser that comes alone never calls it; a dead heat's loser
 *   stops at the lock. A job's first row would need a second statement (no row, no call): every
 *   row exists here.
 * - `packed function`: the guarded function with the claim's arguments after the guard's two
 *   packed in one `text` parameter (fields joined by U+001F, empty for NULL), which a loser's
 *   statement binds but never reads: each parameter a statement binds costs a loser, who reads
 *   only the job and the occurrence. (A `text[]` parameter saves nothing: parsing it costs as
 *   much as the parameters it replaces.)
 * - `counted function`: the same, but a count over the job's rows also calls the function for a
 *   missing row, so one statement covers a job's first claim too.
 * - `floor`: each job's winner chosen in advance sends the claim alone, every other replica the
 *   probe alone.
 */
import { parseArgs } from 'node:util'
import pg from 'pg'
import { Cleanups, parseMajor, startServer } from '../dev/lifecycle.ts'
import { plainUpsertSql } from '../dev/peers.ts'
import { claimSql, createTableSql, probeSql, quoteTable } from '../src/sql.ts'
import { clockMs, percentile } from './measure.ts'

const { values } = parseArgs({
  options: {
    pg: { type: 'string' },
    jobs: { type: 'string', default: '3000' },
    rounds: { type: 'string', default: '3' },
    quick: { type: 'boolean', default: false },
  },
})
// --quick checks that every shape runs and wins once a job; its figures mean nothing.
const JOBS = values.quick ? 20 : Number(values.jobs)
const ROUNDS = values.quick ? 1 : Number(values.rounds)
const [BLOCKS, CALLS] = values.quick ? [1, 20] : [7, 2000]
if (!Number.isSafeInteger(JOBS) || JOBS < 1)
  throw new Error(`--jobs must be a positive whole number, got ${values.jobs}`)
if (!Number.isSafeInteger(ROUNDS) || ROUNDS < 0)
  throw new Error(`--rounds must be a whole number, got ${values.rounds}`)
const REPLICAS = 20
const HOUR = 3_600_000
const OCCURRENCE_MS = 1_700_000_000_000

const cleanups = new Cleanups()
cleanups.install()
const server = await startServer(process.env.DATABASE_URL, parseMajor(values.pg), cleanups)
const connect = async () => {
  const client = new pg.Client({ connectionString: server.url })
  await client.connect()
  return client
}
const admin = await connect()
cleanups.add(() => admin.end())

const slotAt = (p: string) => `(to_timestamp((${p} / 1000)::float8) + (${p} % 1000) * interval '1 millisecond')`
const claimFunction = (table: string) => `"${table}_claim"`

// The claim function: the lock gate, then the library's claim, whose RETURNING becomes the result.
function claimFunctionSql(table: string): string {
  const claim = claimSql(table, 'lease').replace(
    /RETURNING [\s\S]*$/,
    `RETURNING ARRAY[to_char(lease.claimed_at AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
  lease.last_missed::text] INTO claim`,
  )
  return `CREATE FUNCTION ${claimFunction(table)}(text, integer, text, bigint, integer, float8, bigint, float8,
  boolean, OUT claim text[]) LANGUAGE plpgsql VOLATILE AS $claim$
BEGIN
  IF NOT $9 THEN
    PERFORM FROM ${quoteTable(table)} AS free WHERE free.job_name = $1 AND free.lease_until <= clock_timestamp()
      AND NOT coalesce(free.last_occurrence >= ${slotAt('$4')}, false) FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN RETURN; END IF;
  END IF;
${claim};
END
$claim$`
}

const packedFunction = (table: string) => `"${table}_claim_packed"`

function packedFunctionSql(table: string): string {
  const field = (n: number) => `nullif(split_part($3, chr(31), ${n}), '')`
  return `CREATE FUNCTION ${packedFunction(table)}(text, bigint, text, OUT claim text[]) LANGUAGE plpgsql VOLATILE
AS $claim$
BEGIN
  claim := ${claimFunction(table)}($1, ${field(1)}::integer, ${field(2)}, $2, ${field(3)}::integer,
    ${field(4)}::float8, ${field(5)}::bigint, ${field(6)}::float8, false);
END
$claim$`
}

const free = `lease.lease_until <= clock_timestamp() AND NOT coalesce(lease.last_occurrence >= ${slotAt('$4::bigint')}, false)`
const call = (table: string, missing: string) =>
  `${claimFunction(table)}($1::text, $2::integer, $3::text, $4::bigint, $5::integer, $6::float8, $7::bigint, $8::float8, ${missing})`

// A row back for every job that has one: `claim` NULL when lost.
function guardedSql(table: string): string {
  return `SELECT CASE WHEN ${free} THEN ${call(table, 'false')} END AS claim
FROM ${quoteTable(table)} AS lease WHERE lease.job_name = $1::text`
}

function packedSql(table: string): string {
  return `SELECT CASE WHEN ${free.replaceAll('$4::bigint', '$2::bigint')}
  THEN ${packedFunction(table)}($1::text, $2::bigint, $3::text) END AS claim
FROM ${quoteTable(table)} AS lease WHERE lease.job_name = $1::text`
}

// A row back only to the winner.
function countedSql(table: string): string {
  return `SELECT claim[1] AS claimed_at, claim[2]::bigint AS missed
FROM (SELECT CASE WHEN count(*) = 0 OR bool_or(${free}) THEN ${call(table, 'count(*) = 0')} END AS claim
  FROM ${quoteTable(table)} AS lease WHERE lease.job_name = $1::text) AS claim
WHERE claim IS NOT NULL`
}

type Kind = 'plain' | 'library' | 'guarded function' | 'packed function' | 'counted function' | 'floor'
const KINDS: Kind[] = ['plain', 'library', 'guarded function', 'packed function', 'counted function', 'floor']
// Named per run and dropped after it, so a server given by DATABASE_URL keeps nothing.
const tableOf = (kind: Kind) => `shapes_${process.pid}_${kind.replace(' ', '_')}`
for (const kind of KINDS) {
  const table = tableOf(kind)
  cleanups.add(async () => {
    await admin.query(`DROP FUNCTION IF EXISTS ${packedFunction(table)}`)
    await admin.query(`DROP FUNCTION IF EXISTS ${claimFunction(table)}`)
    await admin.query(`DROP TABLE IF EXISTS ${quoteTable(table)}`)
  })
  await admin.query(createTableSql(table))
  await admin.query(claimFunctionSql(table))
  await admin.query(packedFunctionSql(table))
}

const params = (job: string, holder: string, occurrence: number | null, leaseMs = HOUR) => [
  job,
  leaseMs,
  holder,
  occurrence,
  HOUR / 10,
  null,
  null,
  null,
]
// The guard's two parameters, then the rest of `params` packed as the claim function takes them.
const packed = (job: string, holder: string, occurrence: number | null, leaseMs = HOUR) => {
  const [, lease, , , every, ...rest] = params(job, holder, occurrence, leaseMs)
  return [job, occurrence, [lease, holder, every, ...rest].map((v) => v ?? '').join('\u001f')]
}
const send = (c: pg.Client, name: string, text: string, values: unknown[] = []) => c.query({ name, text, values })

// The two guarded shapes: one statement, a row with a non-NULL claim to the winner.
const guardedShapes = {
  'guarded function': { sql: guardedSql, args: params },
  'packed function': { sql: packedSql, args: packed },
}
type GuardedKind = keyof typeof guardedShapes
const claimOnce = async (
  c: pg.Client,
  kind: GuardedKind,
  ...[job, holder, occurrence, leaseMs]: Parameters<typeof params>
): Promise<boolean> => {
  const { sql, args } = guardedShapes[kind]
  return (await send(c, kind, sql(tableOf(kind)), args(job, holder, occurrence, leaseMs))).rows[0]?.claim != null
}

/** One claimant's claim of `job` by `kind`; true when it won. */
function claimant(c: pg.Client, kind: Kind, replica: number): (job: string, index: number) => Promise<boolean> {
  const table = tableOf(kind)
  const holder = `replica-${replica}`
  let unprobed = 0
  const claim = async (job: string) =>
    (await send(c, 'claim', claimSql(table, 'lease'), params(job, holder, null))).rowCount === 1
  const probe = async (job: string) => (await send(c, 'probe', probeSql(table), [job, null])).rowCount === 1
  return async (job, index) => {
    if (kind === 'plain') return (await c.query(plainUpsertSql(table), [job, HOUR, holder])).rowCount === 1
    if (kind === 'guarded function' || kind === 'packed function') return claimOnce(c, kind, job, holder, null)
    if (kind === 'counted function')
      return (await send(c, 'counted', countedSql(table), params(job, holder, null))).rowCount === 1
    if (kind === 'floor') return index % REPLICAS === replica ? claim(job) : probe(job).then(() => false)
    if (unprobed > 0) {
      unprobed--
      const won = await claim(job)
      if (won) unprobed = 3
      return won
    }
    if (await probe(job)) return false
    unprobed = 3
    return claim(job)
  }
}

/** Every replica claims every job once, in the same order from the same moment. */
async function fleetRound(kind: Kind): Promise<number> {
  const table = quoteTable(tableOf(kind))
  await admin.query(`TRUNCATE ${table}`)
  await admin.query(`INSERT INTO ${table} (job_name, lease_until, holder)
    SELECT 'job-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, ${JOBS - 1}) AS i`)
  await admin.query(`VACUUM ANALYZE ${table}`)
  await admin.query('CHECKPOINT')
  const conns = await Promise.all(Array.from({ length: REPLICAS }, connect))
  let winners = 0
  const start = clockMs()
  await Promise.all(
    conns.map(async (c, r) => {
      const claim = claimant(c, kind, r)
      for (let j = 0; j < JOBS; j++) if (await claim(`job-${j}`, j)) winners++
    }),
  )
  const ms = clockMs() - start
  await Promise.all(conns.map((c) => c.end()))
  if (winners !== JOBS) throw new Error(`${kind}: ${winners} winners for ${JOBS} jobs`)
  return (JOBS * REPLICAS * 1000) / ms
}

/** Per-call ms of each case, blocks of each interleaved, the median of the blocks. */
async function interleaved(cases: Record<string, (i: number) => Promise<unknown>>): Promise<Record<string, number>> {
  const samples: Record<string, number[]> = {}
  for (let block = 0; block < BLOCKS; block++) {
    for (const [name, op] of Object.entries(cases)) {
      for (let i = 0; i < CALLS / 10; i++) await op(i)
      const start = clockMs()
      for (let i = 0; i < CALLS; i++) await op(i)
      samples[name] = [...(samples[name] ?? []), (clockMs() - start) / CALLS]
    }
  }
  return Object.fromEntries(
    Object.entries(samples).map(([name, xs]) => [
      name,
      percentile(
        [...xs].sort((a, b) => a - b),
        0.5,
      ),
    ]),
  )
}

const print = (line: string) => process.stdout.write(`${line}\n`)
const c = await connect()
cleanups.add(() => c.end())
const probed = tableOf('library')
for (const kind of ['library', 'guarded function', 'packed function', 'counted function'] as const) {
  const table = tableOf(kind)
  await admin.query(`INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder, claimed_at, last_occurrence)
    VALUES ('held', clock_timestamp() + interval '1 day', 'other', clock_timestamp(), to_timestamp(${OCCURRENCE_MS / 1000}))`)
}
const losing = await interleaved({
  'SELECT 1': () => send(c, 's1', 'SELECT 1'),
  'the probe': () => send(c, 'probe', probeSql(probed), ['held', null]),
  'the claim INSERT': () => send(c, 'claim', claimSql(probed, 'lease'), params('held', 'me', null)),
  'guarded, lease-only': () => claimOnce(c, 'guarded function', 'held', 'me', null),
  'guarded, occurrence': () => claimOnce(c, 'guarded function', 'held', 'me', OCCURRENCE_MS),
  'packed, lease-only': () => claimOnce(c, 'packed function', 'held', 'me', null),
  'packed, occurrence': () => claimOnce(c, 'packed function', 'held', 'me', OCCURRENCE_MS),
  counted: () => send(c, 'counted', countedSql(tableOf('counted function')), params('held', 'me', null)),
})
print('a loser alone, one connection, p50 of per-call means:')
for (const [name, ms] of Object.entries(losing))
  print(`  ${name.padEnd(22)} ${(ms * 1000).toFixed(1)} µs  ${(ms / losing['SELECT 1']!).toFixed(2)}×`)

// Winners: every lease 0 ms long, so each claim of the 50 jobs finds it expired.
for (const kind of ['plain', 'library', 'guarded function', 'packed function'] as const) {
  const table = tableOf(kind)
  await admin.query(`TRUNCATE ${quoteTable(table)}`)
  await admin.query(`INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder)
    SELECT 'win-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, 49) AS i`)
}
const won = (ok: boolean) => {
  if (!ok) throw new Error('a winning claim lost')
}
const winning = await interleaved({
  'plain upsert': async (i) =>
    won((await c.query(plainUpsertSql(tableOf('plain')), [`win-${i % 50}`, 0, 'me'])).rowCount === 1),
  'the claim alone': async (i) =>
    won((await send(c, 'claim-win', claimSql(probed, 'lease'), params(`win-${i % 50}`, 'me', null, 0))).rowCount === 1),
  guarded: async (i) => won(await claimOnce(c, 'guarded function', `win-${i % 50}`, 'me', null, 0)),
  packed: async (i) => won(await claimOnce(c, 'packed function', `win-${i % 50}`, 'me', null, 0)),
})
print('a winner alone, one connection:')
for (const [name, ms] of Object.entries(winning))
  print(
    `  ${name.padEnd(22)} ${(ms * 1000).toFixed(1)} µs  ${(ms / winning['plain upsert']!).toFixed(2)}× the plain upsert`,
  )

print(`lockstep rounds, ${JOBS} jobs × ${REPLICAS} replicas, claims per second (× the round's plain upsert):`)
for (let round = 1; round <= ROUNDS; round++) {
  const rates = new Map<Kind, number>()
  for (const kind of KINDS) rates.set(kind, await fleetRound(kind))
  const plain = rates.get('plain')!
  print(
    `  round ${round}: ${KINDS.map((k) => `${k} ${Math.round(rates.get(k)!)} (${(rates.get(k)! / plain).toFixed(2)}×)`).join(', ')}`,
  )
}
await cleanups.run()
