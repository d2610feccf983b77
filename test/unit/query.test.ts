/**
 * How a statement is sent, against a stand-in shaped like a `pg` Client: which errors make the
 * library resend the statement as plain text (a refusal raised before the statement ran), and
 * which reach the caller unchanged (anything that may have run).
 */
import assert from 'node:assert/strict'
import { EventEmitter } from 'node:events'
import { describe, test } from 'node:test'
import { handleState } from '../../src/handle.ts'
import { type Queryable, withCronLease } from '../../src/index.ts'
import { claimSql, probeSql, SAVEPOINT_SQL, TABLE_FACTS_SQL } from '../../src/sql.ts'
import { isProbe, LOSS, WIN } from '../helpers/stand-in.ts'

type Sent = { named: string; text: string } | { plain: string }

/** What a table of the current shape answers to the read of its facts. */
function factsRow() {
  return {
    rowCount: 1,
    rows: [{ exists: true, columns: 18, current: true, history: true, checked_at: new Date().toISOString() }],
  }
}

/**
 * The answer of the stand-in: the facts row to the facts read, no row to the probe (the lease is
 * free, so the claim is sent), a won claim to anything else.
 */
const answer = (text: string) => (text === TABLE_FACTS_SQL ? factsRow() : isProbe({ text, params: [] }) ? LOSS : WIN)

/**
 * A stand-in `pg` Client (it has `connectionParameters`, as pg's does): a named query of a text
 * `refused` picks (default: any) meets `refusal` when one is given, a plain one is answered; with
 * `factsError`, the read of the table's facts fails with it. `status` is what
 * getTransactionStatus() reports.
 */
function pgLike(
  refusal?: { code: string; message: string },
  status = 'I',
  factsError?: { code: string; message: string },
  refused: (text: string) => boolean = () => true,
) {
  const sent: Sent[] = []
  const db = {
    connectionParameters: {},
    getTransactionStatus: () => status,
    async query(config: string | { name: string; text: string }, _params?: unknown[]) {
      if (typeof config === 'string') {
        sent.push({ plain: config })
        if (factsError && config === TABLE_FACTS_SQL) throw Object.assign(new Error(factsError.message), factsError)
        return answer(config)
      }
      sent.push({ named: config.name, text: config.text })
      if (refusal && refused(config.text)) throw Object.assign(new Error(refusal.message), refusal)
      return answer(config.text)
    },
  }
  return { db: db as unknown as Queryable, sent }
}

const PROBE = probeSql('leases')
const CLAIM = claimSql('leases', 'lease')
const claim = (db: Queryable) => withCronLease(db, 'job', 1000, () => 'ran', { table: 'leases', record: false })

describe('a refusal of the prepared form is retried once as plain text', () => {
  for (const [code, message] of [
    ['26000', 'prepared statement "pg_cron_lease_…" does not exist'],
    ['42P05', 'prepared statement "pg_cron_lease_…" already exists'],
    ['0A000', 'cached plan must not change result type'],
  ]) {
    test(`${code} (${message}): the refused probe is resent plain, the claim goes plain and wins, and the handle stays plain`, async () => {
      const { db, sent } = pgLike({ code: code!, message: message! })
      assert.deepEqual(await claim(db), { ran: true, result: 'ran' })
      assert.equal(sent.length, 4)
      assert.deepEqual(sent[0], { plain: TABLE_FACTS_SQL }, "the table's facts are read first, as plain text")
      const named = sent[1] as { named: string; text: string }
      assert.match(named.named, /^pg_cron_lease_[0-9a-f]{24}$/)
      assert.equal(named.text, PROBE)
      assert.deepEqual(sent.slice(2), [{ plain: PROBE }, { plain: CLAIM }], 'the claim is not tried prepared after')
      assert.equal(handleState(db).unprepared, true)
      await claim(db)
      assert.deepEqual(
        sent.slice(4),
        [{ plain: CLAIM }],
        'the next claim is plain from the start, the shape known (and, after a win, unprobed)',
      )
      // A table this handle has not won a claim on is probed: that probe too is plain from the start.
      await withCronLease(db, 'job', 1000, () => 'ran', { table: 'other', record: false })
      assert.deepEqual(
        sent.slice(5),
        [{ plain: TABLE_FACTS_SQL }, { plain: probeSql('other') }, { plain: claimSql('other', 'lease') }],
        'a probe is plain from the start too',
      )
    })
  }

  test("a refusal of the claim's prepared form after a prepared probe: the claim alone is resent plain, and wins", async () => {
    const refusal = { code: '26000', message: 'prepared statement "pg_cron_lease_…" does not exist' }
    const { db, sent } = pgLike(refusal, 'I', undefined, (text) => text === CLAIM)
    assert.deepEqual(await claim(db), { ran: true, result: 'ran' })
    assert.deepEqual(
      sent.map((s) => ('named' in s ? ['named', s.text] : ['plain', s.plain])),
      [
        ['plain', TABLE_FACTS_SQL],
        ['named', PROBE],
        ['named', CLAIM],
        ['plain', CLAIM],
      ],
    )
    assert.equal(handleState(db).unprepared, true)
  })
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
      assert.equal(sent.filter((s) => 'named' in s).length, 1, 'the probe is sent once')
      assert.equal(sent.length, 2, 'the facts read and the probe: nothing resent, and no claim after a failed probe')
      assert.equal(handleState(db).unprepared, false)
      // The same error on the claim, after a probe that found the lease free.
      const onClaim = pgLike({ code: code!, message: message! }, 'I', undefined, (text) => text === CLAIM)
      await assert.rejects(claim(onClaim.db), (error: unknown) => (error as { code?: string }).code === code)
      assert.deepEqual(
        onClaim.sent.filter((s) => 'named' in s).map((s) => s.text),
        [PROBE, CLAIM],
        'the claim is sent once',
      )
      assert.equal(onClaim.sent.length, 3, 'the facts read, the probe and the claim, nothing resent')
      assert.equal(handleState(onClaim.db).unprepared, false)
    })
  }

  test("an error on the read of the table's facts rejects the claim with it, and no claim is sent", async () => {
    const timeout = { code: '57014', message: 'canceling statement due to statement timeout' }
    const { db, sent } = pgLike(undefined, 'I', timeout)
    await assert.rejects(claim(db), (error: unknown) => (error as { code?: string }).code === '57014')
    assert.deepEqual(sent, [{ plain: TABLE_FACTS_SQL }])
  })
})

describe('which pg handles get the prepared form', () => {
  test("a client inside a transaction is sent plain text under the library's one savepoint; in an aborted one, plain text alone", async () => {
    const inside = pgLike(undefined, 'T')
    await claim(inside.db)
    await claim(inside.db)
    const texts = (inside.sent as { plain: string }[]).map((sent) => sent.plain)
    // The second claim follows a win through this handle, so it goes without the probe. One name
    // serves every statement: they go one at a time, so a RELEASE only ever releases its own.
    const statements = [TABLE_FACTS_SQL, PROBE, CLAIM, CLAIM]
    assert.deepEqual(
      texts,
      statements.flatMap((text) => [SAVEPOINT_SQL.open, text, SAVEPOINT_SQL.release]),
    )
    const aborted = pgLike(undefined, 'E')
    await claim(aborted.db)
    assert.deepEqual(aborted.sent, [{ plain: TABLE_FACTS_SQL }, { plain: PROBE }, { plain: CLAIM }], 'status E')
  })

  test('one name per statement text: the same text has the same name, another table another name', async () => {
    const { db, sent } = pgLike()
    await claim(db)
    await claim(db)
    await withCronLease(db, 'job', 1000, () => null, { table: 'other', record: false })
    const named = sent.filter((s): s is { named: string; text: string } => 'named' in s)
    // The second claim on 'leases' follows a win there, so it goes without the probe.
    assert.deepEqual(
      named.map((s) => s.text),
      [PROBE, CLAIM, CLAIM, probeSql('other'), claimSql('other', 'lease')],
    )
    const [probe, a, b, otherProbe, c] = named
    assert.equal(a!.named, b!.named)
    // The probe sent again, by a handle that has won nothing: names are per text, whichever handle sends it.
    const fresh = pgLike()
    await claim(fresh.db)
    const probeAgain = fresh.sent.find((s): s is { named: string; text: string } => 'named' in s && s.text === PROBE)
    assert.equal(probe!.named, probeAgain!.named)
    assert.notEqual(probe!.named, a!.named, 'the probe and the claim are two texts, so two names')
    assert.notEqual(a!.named, c!.named)
    assert.notEqual(probe!.named, otherProbe!.named)
    const facts = sent.filter((s) => 'plain' in s)
    assert.deepEqual(facts, [{ plain: TABLE_FACTS_SQL }, { plain: TABLE_FACTS_SQL }], 'one plain facts read per table')
  })
})

describe('a pg client before 8.21, which has no getTransactionStatus()', () => {
  /**
   * A stand-in shaped like such a client: its connection emits each ReadyForQuery with the
   * transaction status, as pg's does, and Postgres's refusal of a savepoint outside a transaction.
   */
  function oldPgLike() {
    const connection = new EventEmitter()
    let status = 'I'
    const sent: string[] = []
    const db = {
      connectionParameters: {},
      connection,
      async query(config: string | { name: string; text: string }, _params?: unknown[]) {
        const text = typeof config === 'string' ? config : config.text
        sent.push(typeof config === 'string' ? text : `named: ${text}`)
        try {
          if (text === 'BEGIN') status = 'T'
          if (text === 'COMMIT') status = 'I'
          if (text.startsWith('SAVEPOINT') && status === 'I') {
            throw Object.assign(new Error('SAVEPOINT can only be used in transaction blocks'), { code: '25P01' })
          }
          return answer(text)
        } finally {
          connection.emit('readyForQuery', { status })
        }
      },
    }
    return { db: db as unknown as Queryable, sent }
  }

  test('its first statement asks by a savepoint; from then on its state is read from its replies', async () => {
    const { db, sent } = oldPgLike()
    await claim(db)
    assert.deepEqual(sent.splice(0), [SAVEPOINT_SQL.open, TABLE_FACTS_SQL, `named: ${PROBE}`, `named: ${CLAIM}`])
    await db.query('BEGIN', [])
    await claim(db)
    assert.deepEqual(sent.splice(0), ['BEGIN', SAVEPOINT_SQL.open, CLAIM, SAVEPOINT_SQL.release])
    await db.query('COMMIT', [])
    await claim(db)
    assert.deepEqual(sent.splice(0), ['COMMIT', `named: ${CLAIM}`])
  })
})
