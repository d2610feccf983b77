import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { pauseJob, releaseLease, resumeJob } from '../../src/index.ts'
import { releaseSql } from '../../src/sql.ts'
import { standIn } from '../helpers/stand-in.ts'

const CHANGED = {
  rows: [{ job_name: 'job', lease_until: 'infinity', paused_until: 'infinity', checked_at: 'x', in_future: true }],
}
/** A table of the current shape, answering `changed` to the admin statement (its facts read is the stand-in's). */
const table = (changed: unknown = CHANGED) => standIn(() => changed)

describe('pauseJob, resumeJob and releaseLease validate before the database is touched', () => {
  test('db, jobName and the options are checked, naming the argument and showing the value', async () => {
    const cases: [(db: never) => Promise<boolean>, RegExp][] = [
      [(db) => pauseJob(db, ''), /jobName must be a non-empty string, got ""/],
      [(db) => resumeJob(db, 7 as never), /jobName must be a non-empty string, got 7/],
      [
        (db) => releaseLease(db, 'job', { tabel: 'x' } as never),
        /opts\.tabel must be one of the known options \(table, lockTimeoutMs\)/,
      ],
      [(db) => releaseLease(db, 'job', { lockTimeoutMs: 0 }), /opts\.lockTimeoutMs must be at least 1 ms/],
      [(db) => resumeJob(db, 'job', { lockTimeoutMs: '5s' as never }), /opts\.lockTimeoutMs must be a finite number/],
      [(db) => pauseJob(db, 'job', { forMs: 0 }), /opts\.forMs must be at least 1 ms/],
      [
        (db) => pauseJob(db, 'job', { until: 'tomorrow' }),
        /opts\.until must be a valid Date, or an ISO-8601 date-time with a zone.*got "tomorrow"/,
      ],
      [(db) => pauseJob(db, 'job', { until: '2026-12-01T06:00:00' }), /opts\.until must be .*with a zone/],
      [(db) => pauseJob(db, 'job', { until: new Date(Number.NaN) }), /opts\.until must be .*got an Invalid Date/],
      [
        (db) => pauseJob(db, 'job', { until: '2099-02-30T06:00:00Z' }),
        /opts\.until must be .*got "2099-02-30T06:00:00Z"/,
      ],
      [
        (db) => pauseJob(db, 'job', { until: '2099-04-31T06:00:00Z' }),
        /opts\.until must be .*got "2099-04-31T06:00:00Z"/,
      ],
      [(db) => pauseJob(db, 'job', { until: '9999-12-31T23:59:59-12:00' }), /opts\.until must be between 1970/],
      [(db) => pauseJob(db, 'job', { until: new Date(8.64e15) }), /opts\.until must be between 1970/],
      [(db) => pauseJob(db, 'job', { until: hostileProxy() }), /opts\.until must be/],
      [(db) => pauseJob(db, 'job', { until: revokedProxy() }), /opts\.until must be/],
      [
        (db) => pauseJob(db, 'job', { until: new Date(), forMs: 1000 }),
        /opts\.until must be left out when opts\.forMs is given/,
      ],
      [(db) => pauseJob(db, 'job', { table: 'a; DROP TABLE b' }), /opts\.table must be/],
    ]
    for (const [call, message] of cases) {
      const db = table()
      await assert.rejects(call(db as never), (e: unknown) => e instanceof TypeError && message.test(e.message))
      assert.equal(db.calls.length, 0, String(message))
    }
    await assert.rejects(pauseJob({} as never, 'job'), /db must be an object with a query/)
  })

  test('one statement on the named job; the pause end goes as UTC text; true when a row changed, false when none', async () => {
    const db = table()
    assert.equal(await pauseJob(db, 'job', { until: '2099-12-01T08:00:00+02:00', table: 'jobs.leases' }), true)
    const sent = () => db.calls
    assert.deepEqual(sent()[0]!.params, ['job', null, '2099-12-01T06:00:00.000Z', 5000], 'the lock wait last, 5 s')
    assert.match(sent()[0]!.text, /\n {2}UPDATE "jobs"\."leases" AS lease\n/)
    await pauseJob(db, 'job', { forMs: 1500.4, lockTimeoutMs: 250 })
    assert.deepEqual(sent()[1]!.params, ['job', 1500, null, 250])
    await pauseJob(db, 'job')
    assert.deepEqual(sent()[2]!.params, ['job', null, null, 5000])
    const none = table({ rows: [] })
    assert.equal(await resumeJob(none, 'job'), false)
    assert.equal(await releaseLease(none, 'job'), false)
    await assert.rejects(releaseLease(table({ rowCount: 1 }), 'job'), /cannot tell whether 'job' was changed/)
  })

  test("each reads the table's facts afresh, once per call, before its one statement", async () => {
    const db = table()
    await pauseJob(db, 'job')
    await resumeJob(db, 'job')
    await releaseLease(db, 'job')
    assert.equal(db.facts.length, 3, 'one facts read per call, none remembered from the last')
    assert.equal(db.calls.length, 3)
  })
})

describe('pauseJob and resumeJob need the current shape; releaseLease works on either', () => {
  test('on a table of the original shape, pausing and resuming refuse with the migrate command, sending nothing', async () => {
    for (const [call, doing] of [
      [(db: never) => pauseJob(db, 'job', { table: 'jobs.leases' }), 'pausing'],
      [(db: never) => resumeJob(db, 'job', { table: 'jobs.leases' }), 'resuming'],
    ] as const) {
      const db = standIn(() => CHANGED, 'original')
      await assert.rejects(call(db as never), (e: unknown) => {
        const { message } = e as Error
        return (
          new RegExp(`^pg-cron-lease: ${doing} needs .*jobs\\.leases lacks`).test(message) &&
          message.includes('run `pg-cron-lease migrate --table jobs.leases`') &&
          message.endsWith('nothing was changed')
        )
      })
      assert.equal(db.facts.length, 1)
      assert.equal(db.calls.length, 0, `${doing}: nothing sent after the facts read`)
    }
  })

  test("releaseLease on a table of the original shape sends the original shape's release", async () => {
    const db = standIn(
      () => ({ rows: [{ job_name: 'job', lease_until: 'x', paused_until: null, checked_at: 'y' }] }),
      'original',
    )
    assert.equal(await releaseLease(db, 'job'), true)
    assert.deepEqual(db.calls, [{ text: releaseSql('cron_leases', 'original'), params: ['job', 5000] }])
    assert.doesNotMatch(
      db.calls[0]!.text,
      /lease\.paused_until|claim_until/,
      'it names no column the original shape lacks',
    )
    const current = table()
    await releaseLease(current, 'job')
    assert.equal(current.calls[0]!.text, releaseSql('cron_leases', 'current'))
  })

  test('a missing table is refused by every one of them, naming it, with nothing written', async () => {
    for (const call of [
      (db: never) => pauseJob(db, 'job'),
      (db: never) => resumeJob(db, 'job'),
      (db: never) => releaseLease(db, 'job'),
    ]) {
      const db = standIn(() => CHANGED, 'missing')
      await assert.rejects(
        call(db as never),
        /the lease table cron_leases does not exist \(or this role cannot see it\).*pg-cron-lease migrate.*nothing was changed$/,
      )
      assert.equal(db.calls.length, 0)
    }
  })
})

function hostileProxy(): Date {
  return new Proxy(new Date(), {
    getPrototypeOf() {
      throw new Error('trap')
    },
    get() {
      throw new Error('trap')
    },
  })
}

function revokedProxy(): Date {
  const { proxy, revoke } = Proxy.revocable(new Date(), {})
  revoke()
  return proxy
}
