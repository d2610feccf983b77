import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { pauseJob, releaseLease, resumeJob } from '../../src/index.ts'
import { PAUSE_COLUMNS } from '../../src/sql.ts'
import { type Call, standIn } from '../helpers/stand-in.ts'

const CHANGED = {
  rows: [{ job_name: 'job', lease_until: 'infinity', paused_until: 'infinity', checked_at: 'x', in_future: true }],
}
const COLUMNS = {
  rows: [{ exists: true, columns: ['job_name', 'lease_until', 'holder', 'claimed_at', ...PAUSE_COLUMNS] }],
}
const isProbe = (call: Call) => call.text.includes('FROM pg_attribute')
/** A table of the current shape: the column probe, then `changed` for the admin statement. */
const table = (changed: unknown = CHANGED) => standIn((call) => (isProbe(call) ? COLUMNS : changed))

describe('pauseJob, resumeJob and releaseLease validate before the database is touched', () => {
  test('db, jobName and the options are checked, naming the argument and showing the value', async () => {
    const cases: [(db: never) => Promise<boolean>, RegExp][] = [
      [(db) => pauseJob(db, ''), /jobName must be a non-empty string, got ""/],
      [(db) => resumeJob(db, 7 as never), /jobName must be a non-empty string, got 7/],
      [
        (db) => releaseLease(db, 'job', { tabel: 'x' } as never),
        /opts\.tabel must be one of the known options \(table\)/,
      ],
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
    const sent = () => db.calls.filter((call) => !isProbe(call))
    assert.deepEqual(sent()[0]!.params, ['job', null, '2099-12-01T06:00:00.000Z'])
    assert.match(sent()[0]!.text, /\n {2}UPDATE "jobs"\."leases" AS lease\n/)
    await pauseJob(db, 'job', { forMs: 1500.4 })
    assert.deepEqual(sent()[1]!.params, ['job', 1500, null])
    await pauseJob(db, 'job')
    assert.deepEqual(sent()[2]!.params, ['job', null, null])
    const none = table({ rows: [] })
    assert.equal(await resumeJob(none, 'job'), false)
    assert.equal(await releaseLease(none, 'job'), false)
    await assert.rejects(releaseLease(table({ rowCount: 1 }), 'job'), /cannot tell whether 'job' was changed/)
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
