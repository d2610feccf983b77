/**
 * How a statement is sent, against a stand-in shaped like a `pg` Client: which errors make the
 * library resend the statement as plain text (a refusal raised before the statement ran), and
 * which reach the caller unchanged (anything that may have run).
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { type Queryable, withCronLease } from '../../src/index.ts'
import { claimSql, releaseSavepointSql, savepointSql, tableFactsSql } from '../../src/sql.ts'
import { handleState } from '../../src/state.ts'
import { WIN } from '../helpers/stand-in.ts'

type Sent = { named: string; text: string } | { plain: string }

/** What a table of the current shape answers to the read of its facts. */
function factsRow() {
  return { rowCount: 1, rows: [{ exists: true, columns: 18, current: true, checked_at: new Date().toISOString() }] }
}

/** The answer of the stand-in: the facts row to the facts read, a won claim to anything else. */
const answer = (text: string) => (text === tableFactsSql() ? factsRow() : WIN)

/**
 * A stand-in `pg` Client (it has `connectionParameters`, as pg's does): a named query meets
 * `refusal` when one is given, a plain one is answered; with `factsError`, the read of the table's
 * facts fails with it. `status` is what getTransactionStatus() reports.
 */
function pgLike(
  refusal?: { code: string; message: string },
  status = 'I',
  factsError?: { code: string; message: string },
) {
  const sent: Sent[] = []
  const db = {
    connectionParameters: {},
    getTransactionStatus: () => status,
    async query(config: string | { name: string; text: string }, _params?: unknown[]) {
      if (typeof config === 'string') {
        sent.push({ plain: config })
        if (factsError && config === tableFactsSql()) throw Object.assign(new Error(factsError.message), factsError)
        return answer(config)
      }
      sent.push({ named: config.name, text: config.text })
      if (refusal) throw Object.assign(new Error(refusal.message), refusal)
      return answer(config.text)
    },
  }
  return { db: db as unknown as Queryable, sent }
}

const CLAIM = claimSql('leases', 'current')
const claim = (db: Queryable) => withCronLease(db, 'job', 1000, () => 'ran', { table: 'leases', record: false })

describe('a refusal of the prepared form is retried once as plain text', () => {
  for (const [code, message] of [
    ['26000', 'prepared statement "pg_cron_lease_…" does not exist'],
    ['42P05', 'prepared statement "pg_cron_lease_…" already exists'],
    ['0A000', 'cached plan must not change result type'],
  ]) {
    test(`${code} (${message}): the claim wins on the retry and the handle stays plain`, async () => {
      const { db, sent } = pgLike({ code: code!, message: message! })
      assert.deepEqual(await claim(db), { ran: true, result: 'ran' })
      assert.equal(sent.length, 3)
      assert.deepEqual(sent[0], { plain: tableFactsSql() }, "the table's facts are read first, as plain text")
      const named = sent[1] as { named: string; text: string }
      assert.match(named.named, /^pg_cron_lease_[0-9a-f]{24}$/)
      assert.equal(named.text, CLAIM)
      assert.deepEqual(sent[2], { plain: CLAIM })
      assert.equal(handleState(db).unprepared, true)
      await claim(db)
      assert.deepEqual(sent.slice(3), [{ plain: CLAIM }], 'the next claim is plain from the start, the shape known')
    })
  }
})

describe('any other error reaches the caller unchanged, with no retry', () => {
  for (const [code, message] of [
    ['57014', 'canceling statement due to statement timeout'],
    ['40001', 'could not serialize access due to concurrent update'],
    ['42P01', 'relation "leases" does not exist'],
  ]) {
    test(`${code} (${message})`, async () => {
      const { db, sent } = pgLike({ code: code!, message: message! })
      await assert.rejects(claim(db), (error: unknown) => (error as { code?: string }).code === code)
      assert.equal(sent.filter((s) => 'named' in s).length, 1, 'the claim is sent once')
      assert.equal(sent.length, 2, 'the facts read and the claim, nothing resent')
      assert.equal(handleState(db).unprepared, false)
    })
  }

  test("an error on the read of the table's facts rejects the claim with it, and no claim is sent", async () => {
    const timeout = { code: '57014', message: 'canceling statement due to statement timeout' }
    const { db, sent } = pgLike(undefined, 'I', timeout)
    await assert.rejects(claim(db), (error: unknown) => (error as { code?: string }).code === '57014')
    assert.deepEqual(sent, [{ plain: tableFactsSql() }])
  })
})

describe('which pg handles get the prepared form', () => {
  test('a client inside a transaction is sent plain text under a savepoint; in an aborted one, plain text alone', async () => {
    const inside = pgLike(undefined, 'T')
    await claim(inside.db)
    await claim(inside.db)
    const texts = (inside.sent as { plain: string }[]).map((sent) => sent.plain)
    const names = [0, 3, 6].map((i) => texts[i]!.slice('SAVEPOINT '.length))
    for (const name of names) assert.match(name, /^pg_cron_lease_\d+$/)
    assert.equal(new Set(names).size, 3, 'each statement has a savepoint of its own')
    const [facts, first, second] = names as [string, string, string]
    assert.deepEqual(texts, [
      savepointSql(facts),
      tableFactsSql(),
      releaseSavepointSql(facts),
      `SAVEPOINT ${first}`,
      CLAIM,
      `RELEASE SAVEPOINT ${first}`,
      `SAVEPOINT ${second}`,
      CLAIM,
      `RELEASE SAVEPOINT ${second}`,
    ])
    const aborted = pgLike(undefined, 'E')
    await claim(aborted.db)
    assert.deepEqual(aborted.sent, [{ plain: tableFactsSql() }, { plain: CLAIM }], 'status E')
  })

  test('one name per statement text: the same text has the same name, another table another name', async () => {
    const { db, sent } = pgLike()
    await claim(db)
    await claim(db)
    await withCronLease(db, 'job', 1000, () => null, { table: 'other', record: false })
    const [a, b, c] = sent.filter((s): s is { named: string; text: string } => 'named' in s)
    assert.equal(a!.text, CLAIM)
    assert.equal(a!.named, b!.named)
    assert.equal(c!.text, claimSql('other', 'current'))
    assert.notEqual(a!.named, c!.named)
    const facts = sent.filter((s) => 'plain' in s)
    assert.deepEqual(facts, [{ plain: tableFactsSql() }, { plain: tableFactsSql() }], 'one plain facts read per table')
  })
})
