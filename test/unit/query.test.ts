/**
 * How a statement is sent, against a stand-in shaped like a `pg` Client: which errors make the
 * library resend the statement as plain text (a refusal raised before the statement ran), and
 * which reach the caller unchanged (anything that may have run).
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { type Queryable, withCronLease } from '../../src/index.ts'
import { claimSql } from '../../src/sql.ts'
import { isUnprepared } from '../../src/state.ts'
import { WIN } from '../helpers/stand-in.ts'

type Sent = { named: string } | { plain: string }

/**
 * A stand-in `pg` Client (it has `connectionParameters`, as pg's does): a named query meets
 * `refusal` when one is given, a plain one wins. `status` is what getTransactionStatus() reports.
 */
function pgLike(refusal?: { code: string; message: string }, status = 'I') {
  const sent: Sent[] = []
  const db = {
    connectionParameters: {},
    getTransactionStatus: () => status,
    async query(config: string | { name: string; text: string }, _params?: unknown[]) {
      if (typeof config === 'string') {
        sent.push({ plain: config })
        return WIN
      }
      sent.push({ named: config.name })
      if (refusal) throw Object.assign(new Error(refusal.message), refusal)
      return WIN
    },
  }
  return { db: db as unknown as Queryable, sent }
}

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
      assert.equal(sent.length, 2)
      assert.match((sent[0] as { named: string }).named, /^pg_cron_lease_[0-9a-f]{24}$/)
      assert.deepEqual(sent[1], { plain: claimSql('leases') })
      assert.equal(isUnprepared(db), true)
      await claim(db)
      assert.deepEqual(sent[2], { plain: claimSql('leases') }, 'the next claim is plain from the start')
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
      assert.equal(sent.length, 1, 'sent once')
      assert.equal(isUnprepared(db), false)
    })
  }
})

describe('which pg handles get the prepared form', () => {
  test('a client inside a transaction is sent plain text under a savepoint; in an aborted one, plain text alone', async () => {
    const inside = pgLike(undefined, 'T')
    await claim(inside.db)
    await claim(inside.db)
    const texts = (inside.sent as { plain: string }[]).map((sent) => sent.plain)
    const [first, second] = [texts[0]!.slice('SAVEPOINT '.length), texts[3]!.slice('SAVEPOINT '.length)]
    assert.match(first, /^pg_cron_lease_\d+$/)
    assert.notEqual(first, second, 'each statement has a savepoint of its own')
    assert.deepEqual(texts, [
      `SAVEPOINT ${first}`,
      claimSql('leases'),
      `RELEASE SAVEPOINT ${first}`,
      `SAVEPOINT ${second}`,
      claimSql('leases'),
      `RELEASE SAVEPOINT ${second}`,
    ])
    const aborted = pgLike(undefined, 'E')
    await claim(aborted.db)
    assert.deepEqual(aborted.sent, [{ plain: claimSql('leases') }], 'status E')
  })

  test('one name per statement text: the same text has the same name, another table another name', async () => {
    const { db, sent } = pgLike()
    await claim(db)
    await claim(db)
    await withCronLease(db, 'job', 1000, () => null, { table: 'other', record: false })
    const [a, b, c] = sent as Array<{ named: string }>
    assert.equal(a!.named, b!.named)
    assert.notEqual(a!.named, c!.named)
  })
})
