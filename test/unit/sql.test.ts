import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import {
  CRON_LEASES_TABLE_SQL,
  createTableSql,
  DEFAULT_TABLE,
  quoteTable,
  upgradeTableSql,
  withCronLease,
} from '../../src/index.ts'
import { claimSql, extendSql, renewSql } from '../../src/sql.ts'
import { standIn, TOKEN } from '../helpers/stand-in.ts'

const statements = { claim: claimSql('cron_leases'), renew: renewSql('cron_leases'), extend: extendSql('cron_leases') }

describe('the SQL reads the database clock and nothing else', () => {
  test('every statement uses clock_timestamp() and never NOW() or CURRENT_TIMESTAMP', () => {
    for (const [name, text] of Object.entries(statements)) {
      assert.match(text, /clock_timestamp\(\)/, name)
      assert.doesNotMatch(text, /\bnow\(\)|current_timestamp|localtimestamp|transaction_timestamp/i, name)
    }
  })

  test('no statement carries a timestamp computed in Node: every parameter is a name, a length or a token', async () => {
    const db = standIn()
    await withCronLease(db, 'job', 1000, (ctx) => ctx.renew(), { holder: 'h' })
    assert.deepEqual(
      db.calls.map((c) => c.params),
      [
        ['job', 1000, 'h'],
        ['job', 1000, TOKEN],
        ['job', TOKEN, db.calls[2]!.params[2], 'ok', null, null],
      ],
    )
    assert.equal(typeof db.calls[2]!.params[2], 'number', 'a duration, measured on a monotonic clock')
  })
})

describe('the claim is one atomic upsert that losers do not write', () => {
  test('it is a single INSERT … ON CONFLICT (job_name) DO UPDATE … WHERE lease_until <= clock_timestamp()', () => {
    const text = statements.claim
    assert.match(text, /^INSERT INTO "cron_leases" AS lease/)
    assert.match(text, /ON CONFLICT \(job_name\) DO UPDATE/)
    assert.match(text, /WHERE lease\.lease_until <= clock_timestamp\(\)/)
    assert.match(text, /RETURNING /)
    assert.doesNotMatch(text, /\b(BEGIN|COMMIT|pg_advisory)\b/i)
    // The only row lock taken before the arbiter is one nobody waits for.
    assert.equal(text.match(/FOR UPDATE/g)?.length, 1)
    assert.match(text, /FOR UPDATE SKIP LOCKED\)/)
    assert.equal(text.split(';').length, 1, 'one statement')
  })

  test('the insert is tried only when no unexpired lease is visible, and an expired row only when it can be locked now', () => {
    assert.ok(
      statements.claim.includes(`WHERE CASE (SELECT lease_until > clock_timestamp() FROM "cron_leases" WHERE job_name = $1::text)
  WHEN true THEN false
  WHEN false THEN EXISTS (SELECT 1 FROM "cron_leases" WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
  ELSE true
END
ON CONFLICT (job_name) DO UPDATE`),
    )
  })

  test('the claim token comes back as UTC text with microseconds', () => {
    // By interval, not by the name 'UTC', which a POSIX-form session zone can redefine on PG 18.
    assert.match(
      statements.claim,
      /RETURNING to_char\(claimed_at AT TIME ZONE INTERVAL '\+00:00', 'YYYY-MM-DD"T"HH24:MI:SS\.US"Z"'\)/,
    )
    for (const text of Object.values(statements)) assert.doesNotMatch(text, /'UTC'|'Z'|timestamptz '/)
  })

  test('the driver is sent plain text and a params array, never a named statement', async () => {
    const seen: unknown[][] = []
    const db = {
      query(...args: unknown[]) {
        seen.push(args)
        return Promise.resolve({ rowCount: 0, rows: [] })
      },
    }
    await withCronLease(db, 'job', 1000, () => {})
    assert.equal(seen.length, 1)
    assert.equal(typeof seen[0]?.[0], 'string')
    assert.ok(Array.isArray(seen[0]?.[1]))
  })
})

describe('renew is fenced on this claim', () => {
  test('renew and the keep-alive beat match the job, the claim token as text, an unexpired lease and no pause in force', () => {
    const pausedUntil = "(to_jsonb(lease) ->> 'paused_until')::timestamptz"
    const claimUntil = "(to_jsonb(lease) ->> 'claim_until')::timestamptz"
    const fence = `WHERE job_name = $1::text AND claimed_at = (($3::text)::timestamp AT TIME ZONE INTERVAL '+00:00') AND lease_until > clock_timestamp()
  AND NOT coalesce(${pausedUntil} > clock_timestamp()
    AND lease_until = GREATEST(${claimUntil}, ${pausedUntil}), false)
RETURNING `
    for (const text of [statements.renew, statements.extend]) assert.ok(text.includes(fence), text)
  })

  test('renew sets the expiry; the beat only ever moves it later', () => {
    assert.match(statements.renew, /SET lease_until = clock_timestamp\(\) \+ \$2::integer \* interval '1 millisecond'/)
    assert.match(statements.extend, /SET lease_until = GREATEST\(lease_until, clock_timestamp\(\) \+ \$2::integer/)
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
      'last_missed',
      'missed_occurrences',
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
