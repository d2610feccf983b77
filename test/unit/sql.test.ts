import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import {
  CRON_LEASES_TABLE_SQL,
  createTableSql,
  DEFAULT_TABLE,
  historyTableOf,
  quoteTable,
  upgradeTableSql,
  withCronLease,
} from '../../src/index.ts'
import {
  CURRENT_COLUMN_NAMES,
  catchUpSql,
  claimSql,
  fenceSql,
  probeSql,
  recordOutcomeSql,
  recordRunSql,
  renewSql,
  SAVEPOINT_SQL,
  TABLE_FACTS_SQL,
  tableFactsParams,
} from '../../src/sql.ts'
import { standIn, TOKEN } from '../helpers/stand-in.ts'

const statements = {
  probe: probeSql('cron_leases'),
  'current claim': claimSql('cron_leases', 'history'),
  'current catch-up, run only': catchUpSql('cron_leases', 'run'),
  'catch-up': catchUpSql('cron_leases', 'history'),
  'original claim': claimSql('cron_leases', 'original'),
  'current renew': renewSql('cron_leases', 'current'),
  'original renew': renewSql('cron_leases', 'original'),
  record: recordOutcomeSql('cron_leases'),
  'lease-only claim': claimSql('cron_leases', 'lease'),
  'run claim': claimSql('cron_leases', 'run'),
  'run record': recordRunSql('cron_leases'),
  facts: TABLE_FACTS_SQL,
}

describe('the SQL reads the database clock and nothing else', () => {
  test('every statement uses clock_timestamp() and never NOW() or CURRENT_TIMESTAMP', () => {
    for (const [name, text] of Object.entries(statements)) {
      assert.match(text, /clock_timestamp\(\)/, name)
      assert.doesNotMatch(text, /\bnow\(\)|current_timestamp|localtimestamp|transaction_timestamp/i, name)
    }
  })

  test('the fence reads no clock: it locks this claim row FOR KEY SHARE, or matches nothing', () => {
    const fence = fenceSql('cron_leases')
    assert.match(fence, /^SELECT true AS fenced FROM "cron_leases" AS lease\n/)
    assert.match(fence, /FOR KEY SHARE$/)
    assert.doesNotMatch(fence, /\bnow\(\)|current_timestamp|localtimestamp|clock_timestamp|transaction_timestamp/i)
  })

  test('no statement carries a timestamp computed in Node: every parameter is a name, a length or a token', async () => {
    const db = standIn()
    await withCronLease(db, 'job', 1000, (ctx) => ctx.renew(), { holder: 'h' })
    assert.deepEqual(
      db.calls.map((c) => c.params),
      [
        ['job', 1000, 'h', null, 100, null, null, null, 100, 20],
        ['job', 1000, TOKEN, false],
        // The claim returned no run number: the record ends the run in the lease row alone.
        ['job', TOKEN, db.calls[2]!.params[2], 'ok', null],
      ],
    )
    assert.deepEqual(
      db.probes.map((c) => c.params),
      [['job', null]],
      'the probe: the job, and no occurrence',
    )
    assert.equal(typeof db.calls[2]!.params[2], 'number', 'a duration, measured on a monotonic clock')
    const original = standIn(undefined, 'original')
    await withCronLease(original, 'job', 1000, (ctx) => ctx.renew(), { holder: 'h' })
    assert.deepEqual(
      original.calls.map((c) => c.params),
      [
        ['job', 1000, 'h'],
        ['job', 1000, TOKEN, false],
      ],
      'the original shape: its three claim parameters, and no outcome record',
    )
  })
})

describe("the table's facts are one read-only catalog statement", () => {
  test('it reads existence, the column count, the current shape and the database clock, and locks nothing', () => {
    const text = TABLE_FACTS_SQL
    assert.match(text, /^SELECT to_regclass\(\$1::text\) IS NOT NULL AS exists,\n/)
    for (const column of ['columns', 'current', 'history', 'checked_at'])
      assert.match(text, new RegExp(`AS ${column}\\b`), column)
    assert.match(text, /attname = ANY \(\$2::text\[\]\)\)::int = cardinality\(\$2::text\[\]\) AS current/)
    assert.doesNotMatch(
      text.replace(/'[^']*'/g, "''"),
      /\b(INSERT|UPDATE|DELETE|FOR UPDATE|FOR SHARE|FOR KEY SHARE|LOCK)\b/,
    )
  })

  test('its parameters: the quoted table, every current column, and the quoted history table', () => {
    const [table, columns, history] = tableFactsParams('jobs.leases') as [string, string[], string]
    assert.equal(table, '"jobs"."leases"')
    assert.deepEqual(columns, CURRENT_COLUMN_NAMES)
    assert.equal(history, '"jobs"."leases_runs"')
    assert.throws(() => tableFactsParams('a; DROP TABLE b'), TypeError)
  })
})

/** A claim's or catch-up's own upsert: a `history` claimant's is the CTE `claimed`, indented by two spaces. */
function upsertOf(text: string): string {
  const start = text.indexOf('claimed AS (\n')
  if (start === -1) return text
  const body = text.slice(start + 'claimed AS (\n'.length, text.indexOf('\n  RETURNING lease.*)', start))
  return body.replace(/^ {2}/gm, '')
}

describe('the claim on the current shape: a read-only probe, then one atomic upsert', () => {
  test('the probe reads one row and nothing else: a row back is a loss, held lease or an occurrence already claimed', () => {
    assert.equal(
      statements.probe,
      `SELECT true AS held FROM "cron_leases" AS lease
WHERE lease.job_name = $1::text
  AND (lease.lease_until > clock_timestamp() OR lease.last_occurrence >= (to_timestamp(($2::bigint / 1000)::float8) + ($2::bigint % 1000) * interval '1 millisecond'))`,
    )
  })

  test('the upsert never runs early, and tries an existing row only when it can lock it now', () => {
    for (const kind of ['lease', 'run', 'history'] as const) {
      const text = upsertOf(claimSql('cron_leases', kind))
      assert.ok(
        text.includes(`WHERE CASE WHEN slot.at > clock.at + $5::integer * interval '1 millisecond' THEN false
  ELSE NOT EXISTS (SELECT FROM "cron_leases" WHERE job_name = $1::text)
    OR EXISTS (SELECT FROM "cron_leases" AS free WHERE free.job_name = $1::text AND free.lease_until <= clock_timestamp()
      AND NOT coalesce(free.last_occurrence >= slot.at, false) FOR UPDATE SKIP LOCKED)
END
ON CONFLICT (job_name) DO UPDATE`),
        text,
      )
      assert.equal(
        claimSql('cron_leases', kind).match(/FOR UPDATE/g)?.length,
        1,
        'the only lock before the arbiter is one nobody waits for',
      )
    }
  })

  test('the upsert is still the atomic arbiter: it checks the lease and the occurrence again under the row lock', () => {
    for (const kind of ['lease', 'run', 'history'] as const) {
      const text = claimSql('cron_leases', kind)
      assert.match(upsertOf(text), /^INSERT INTO "cron_leases" AS lease \(job_name, lease_until, holder, claimed_at, /)
      assert.match(
        upsertOf(text),
        /\nWHERE lease\.lease_until <= clock_timestamp\(\)\n {2}AND NOT coalesce\(lease\.last_occurrence >= EXCLUDED\.last_occurrence, false\)(\nRETURNING |$)/,
      )
      assert.doesNotMatch(text, /\b(BEGIN|COMMIT|pg_advisory)\b/i)
      assert.equal(text.split(';').length, 1, 'one statement')
    }
  })

  test('the catch-up locks the row last, once every other rule has passed', () => {
    const text = upsertOf(statements['catch-up'])
    assert.match(text, /^UPDATE "cron_leases" AS lease\n/)
    assert.ok(
      text.indexOf('THEN EXISTS (SELECT FROM "cron_leases" AS locked') >
        text.indexOf('AND NOT coalesce(lease.last_occurrence >= '),
    )
    assert.equal(text.match(/FOR UPDATE SKIP LOCKED/g)?.length, 1)
  })

  test('the DDL creates no function: the table is all the library needs', () => {
    for (const ddl of [createTableSql('jobs.leases'), upgradeTableSql('jobs.leases')]) {
      assert.doesNotMatch(ddl, /CREATE FUNCTION|to_regprocedure/)
    }
  })
})

describe('the claim on the original shape is one atomic upsert that losers do not write', () => {
  const text = statements['original claim']

  test('it is a single INSERT … ON CONFLICT (job_name) DO UPDATE … WHERE lease_until <= clock_timestamp()', () => {
    assert.match(text, /^INSERT INTO "cron_leases" AS lease \(job_name, lease_until, holder, claimed_at\)\n/)
    assert.match(text, /ON CONFLICT \(job_name\) DO UPDATE/)
    assert.match(text, /WHERE lease\.lease_until <= clock_timestamp\(\)/)
    assert.match(text, /RETURNING /)
    assert.doesNotMatch(text, /\b(BEGIN|COMMIT|pg_advisory)\b/i)
    // The only row lock taken before the arbiter is one nobody waits for.
    assert.equal(text.match(/FOR UPDATE/g)?.length, 1)
    assert.match(text, /FOR UPDATE SKIP LOCKED\)/)
    assert.equal(text.split(';').length, 1, 'one statement')
    for (const column of CURRENT_COLUMN_NAMES) assert.ok(!text.includes(column), `it names no ${column}`)
  })

  test('the insert is tried only when no unexpired lease is visible, and an expired row only when it can be locked now', () => {
    assert.ok(
      text.includes(`WHERE CASE (SELECT lease_until > clock_timestamp() FROM "cron_leases" WHERE job_name = $1::text)
  WHEN true THEN false
  WHEN false THEN EXISTS (SELECT FROM "cron_leases" WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
  ELSE true
END
ON CONFLICT (job_name) DO UPDATE`),
    )
  })

  test('the claim token comes back as UTC text with microseconds, and only the token', () => {
    // By interval, not by the name 'UTC', which a POSIX-form session zone can redefine on PG 18.
    assert.match(
      text,
      /RETURNING to_char\(claimed_at AT TIME ZONE INTERVAL '\+00:00', 'YYYY-MM-DD"T"HH24:MI:SS\.US"Z"'\) AS claimed_at$/,
    )
    for (const sql of Object.values(statements)) assert.doesNotMatch(sql, /'UTC'|'Z'|timestamptz '/)
  })

  test('the driver is sent plain text and a params array, never a named statement', async () => {
    const seen: unknown[][] = []
    const db = {
      query(...args: unknown[]) {
        seen.push(args)
        return Promise.resolve(
          args[0] === TABLE_FACTS_SQL
            ? {
                rows: [
                  { exists: true, columns: 18, current: true, history: true, checked_at: new Date().toISOString() },
                ],
              }
            : { rowCount: 0, rows: [] },
        )
      },
    }
    await withCronLease(db, 'job', 1000, () => {})
    assert.equal(seen.length, 3, 'the facts read, the probe, then the claim')
    for (const args of seen) {
      assert.equal(typeof args[0], 'string')
      assert.ok(Array.isArray(args[1]))
    }
    assert.equal(seen[1]?.[0], probeSql('cron_leases'))
    assert.equal(seen[2]?.[0], claimSql('cron_leases', 'history'))
  })
})

describe('renew is fenced on this claim', () => {
  test('renew and the keep-alive beat match the job, the claim token as text, an unexpired lease and, on the current shape, no pause in force', () => {
    const fence = `WHERE job_name = $1::text AND claimed_at = (($3::text)::timestamp AT TIME ZONE INTERVAL '+00:00') AND lease_until > clock_timestamp()`
    const pause = `
  AND NOT coalesce(lease.paused_until > clock_timestamp() AND lease.lease_until = GREATEST(lease.claim_until, lease.paused_until), false)
RETURNING `
    assert.ok(statements['current renew'].includes(fence + pause), statements['current renew'])
    assert.ok(statements['original renew'].includes(`${fence}\nRETURNING `), statements['original renew'])
    assert.doesNotMatch(statements['original renew'], /paused_until|claim_until/)
  })

  test('one statement for both: $4 false sets the expiry, $4 true (a beat) only ever moves it later', () => {
    for (const text of [statements['current renew'], statements['original renew']]) {
      assert.ok(
        text.includes(`SET lease_until = CASE WHEN $4::boolean
  THEN GREATEST(lease_until, clock_timestamp() + $2::integer * interval '1 millisecond')
  ELSE clock_timestamp() + $2::integer * interval '1 millisecond' END`),
        text,
      )
    }
  })
})

describe('a statement in a caller transaction runs under a savepoint of the library', () => {
  test('the savepoint, its release and its rollback name the same savepoint', () => {
    assert.equal(SAVEPOINT_SQL.open, 'SAVEPOINT pg_cron_lease')
    assert.equal(SAVEPOINT_SQL.release, 'RELEASE SAVEPOINT pg_cron_lease')
    assert.equal(SAVEPOINT_SQL.rollback, 'ROLLBACK TO SAVEPOINT pg_cron_lease')
  })
})

describe('the table', () => {
  test('the DDL has the columns existing installations have, then the nullable optional columns', () => {
    assert.equal(DEFAULT_TABLE, 'cron_leases')
    assert.ok(
      CRON_LEASES_TABLE_SQL.includes(`    CREATE TABLE IF NOT EXISTS "cron_leases" (
      job_name    TEXT PRIMARY KEY,
      lease_until TIMESTAMPTZ NOT NULL,
      holder      TEXT,
      claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
      last_started_at    TIMESTAMPTZ,
`),
    )
    for (const column of [
      'last_finished_at',
      'last_duration_ms',
      'last_outcome',
      'last_error',
      'every_ms',
      'paused_until',
      'claim_until',
      'last_occurrence',
      'next_due_at',
      'next_occurrence',
      'last_missed',
      'missed_occurrences',
      'run_number',
      'failed_runs',
      'runs_trimmed',
      'unfinished_runs',
    ]) {
      assert.match(CRON_LEASES_TABLE_SQL, new RegExp(`\\n      ${column} +[A-Z ]+,?\\n`), column)
      assert.match(upgradeTableSql(), new RegExp(`ADD COLUMN IF NOT EXISTS ${column} `), column)
    }
    assert.equal(createTableSql(), CRON_LEASES_TABLE_SQL)
  })

  test('sql/ holds the same DDL text the library exports', () => {
    const file = (name: string) => readFileSync(new URL(`../../sql/${name}`, import.meta.url), 'utf8')
    assert.equal(file('cron_leases.sql'), CRON_LEASES_TABLE_SQL)
    assert.equal(file('cron_leases_upgrade.sql'), upgradeTableSql())
  })

  test('createTableSql and upgradeTableSql quote both parts of a schema-qualified name', () => {
    assert.match(
      createTableSql('jobs.leases'),
      /IF to_regclass\('"jobs"\."leases"'\) IS NULL THEN\n {4}CREATE TABLE IF NOT EXISTS "jobs"\."leases" \(/,
    )
    assert.match(upgradeTableSql('jobs.leases'), /ALTER TABLE "jobs"\."leases"\n/)
  })

  test('a table name holding the dollar-quote tag cannot end the DO block early', () => {
    for (const sql of [createTableSql('a$pg_cron_lease$b'), upgradeTableSql('a$pg_cron_lease$b')]) {
      const tag = /^DO (\$\w*\$)\n/.exec(sql)?.[1]
      assert.ok(tag && tag !== '$pg_cron_lease$')
      assert.equal(sql.split(tag).length, 3, 'the tag opens and closes the block, and appears nowhere else')
    }
  })

  test('quoteTable accepts identifiers and schema.identifier, preserving case', () => {
    assert.equal(quoteTable('cron_leases'), '"cron_leases"')
    assert.equal(quoteTable('Jobs.My_Leases$2'), '"Jobs"."My_Leases$2"')
    assert.equal(quoteTable('_x'), '"_x"')
  })

  test('quoteTable rejects everything else with a TypeError showing the value', () => {
    for (const bad of ['x; DROP TABLE y', 'a.b.c', '', '1abc', 'has space', 'a"b', 'a.', 'ä', 5, null, undefined, {}]) {
      assert.throws(
        () => quoteTable(bad as string),
        (e: unknown) => e instanceof TypeError && /table must be/.test(e.message),
      )
    }
    assert.throws(() => quoteTable('x; DROP TABLE y'), /got "x; DROP TABLE y"/)
    assert.throws(() => createTableSql('a.b.c'), TypeError)
  })
})

describe('the history table is named beside its lease table', () => {
  test('name_runs in the same schema, and a long name cut to 63 bytes with a hash of the whole', () => {
    assert.equal(historyTableOf('cron_leases'), 'cron_leases_runs')
    assert.equal(historyTableOf('jobs.leases'), 'jobs.leases_runs')
    const long = `l${'x'.repeat(62)}`
    const other = `l${'x'.repeat(61)}y`
    assert.equal(historyTableOf(long).length, 63)
    assert.ok(historyTableOf(long).endsWith('_runs'))
    assert.notEqual(historyTableOf(long), historyTableOf(other))
    assert.equal(historyTableOf(`s.${long}`), `s.${historyTableOf(long)}`)
    assert.throws(() => historyTableOf('bad name'), /table must be/)
  })
})

describe("a run's row is found by number, whatever the job's age", () => {
  test('the claim trims between bounds the lease row holds, and its record finds its row by number; neither reads an order', () => {
    const claim = claimSql('cron_leases', 'history')
    assert.match(
      claim,
      /WHERE run\.job_name = \$1::text AND run\.run_number > \(SELECT before\.trimmed FROM before\)\n\s+AND run\.run_number <= \(SELECT claimed\.runs_trimmed FROM claimed\)\n/,
      'the trim: above where the last one stopped, up to the run leaving the last $9',
    )
    assert.match(
      claim,
      /run\.failure_number IS NULL OR run\.failure_number <= \(SELECT claimed\.failed_runs - \$10::integer FROM claimed\)/,
    )
    assert.match(
      claim,
      /runs_trimmed = greatest\(coalesce\(lease\.runs_trimmed, 0\), coalesce\(lease\.run_number \+ 1, EXCLUDED\.run_number\) - \$9::integer\)/,
    )
    assert.doesNotMatch(claim, /\bcount\(|ORDER BY|OFFSET|LIMIT/, 'nothing scans the job to find the cut')
    const record = recordRunSql('cron_leases')
    assert.match(
      record,
      /WHERE run\.job_name = \$1::text AND run\.run_number = coalesce\(\(SELECT \$6::bigint FROM recorded\), \$6::bigint\)\n/,
    )
    assert.doesNotMatch(record, /\bmax\(|\bcount\(|ORDER BY|OFFSET|LIMIT/, 'nor does the record')
  })

  test("the index of runs not ok is the history's own, named beside it within 63 bytes", () => {
    assert.match(
      createTableSql('jobs.leases'),
      /CREATE INDEX IF NOT EXISTS "leases_runs_failed" ON "jobs"\."leases_runs" \(job_name, failure_number\)\n\s+WHERE failure_number IS NOT NULL;/,
    )
    const long = `l${'x'.repeat(62)}`
    const name = /CREATE INDEX IF NOT EXISTS "([^"]+)"/.exec(upgradeTableSql(long))![1]!
    assert.equal(name.length, 63)
    assert.ok(name.endsWith('_runs_failed'))
  })
})
