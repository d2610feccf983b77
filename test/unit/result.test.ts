import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { type LeaseContext, withCronLease } from '../../src/index.ts'
import { RECORD_WAIT_MS } from '../../src/outcome.ts'
import { readResult } from '../../src/result.ts'
import { claimSql } from '../../src/sql.ts'
import { isRecord, standIn, TOKEN, WIN } from '../helpers/stand-in.ts'

describe('reading the driver result: won, lost, or cannot tell', () => {
  test('a rowCount of 0 or 1 decides, and agrees with the rows when both are given', () => {
    assert.equal(readResult({ rowCount: 1, rows: [{ claimed_at: TOKEN }] }, 'j', 'claimed').matched, true)
    assert.equal(readResult({ rowCount: 0, rows: [] }, 'j', 'claimed').matched, false)
    assert.equal(readResult({ rowCount: 1 }, 'j', 'claimed').matched, true)
    assert.equal(readResult({ rowCount: 0 }, 'j', 'claimed').matched, false)
  })

  test('without a rowCount (absent or null), the length of rows decides', () => {
    assert.equal(readResult({ rows: [{}] }, 'j', 'claimed').matched, true)
    assert.equal(readResult({ rows: [] }, 'j', 'claimed').matched, false)
    assert.equal(readResult({ rowCount: null, rows: [{}] }, 'j', 'claimed').matched, true)
    assert.equal(readResult({ rowCount: undefined, rows: [] }, 'j', 'claimed').matched, false)
  })

  test('anything else throws a TypeError saying it cannot tell, naming the job', () => {
    for (const bad of [{}, null, undefined, 'ok', 1, { rows: 'x' }, { rowCount: '1' }, { rowCount: -1 }, []]) {
      assert.throws(
        () => readResult(bad, 'billing', 'claimed'),
        (e: unknown) =>
          e instanceof TypeError && e.message.includes("cannot tell whether the lease for 'billing' was claimed"),
        String(bad),
      )
    }
  })

  test('the statements match at most one row, so any other count cannot tell, and neither can a disagreement', () => {
    const row = { claimed_at: TOKEN }
    for (const impossible of [
      { rowCount: 2, rows: [row, row] },
      { rowCount: 2 },
      { rowCount: 1e9 },
      { rowCount: 0.5 },
      { rowCount: Number.NaN, rows: [] },
      { rowCount: -1, rows: [] },
      { rowCount: '1', rows: [row] },
      { rows: [row, row] },
      { rowCount: 1, rows: [row, row] },
      { rowCount: 1, rows: [] },
      { rowCount: 0, rows: [row] },
    ]) {
      for (const action of ['claimed', 'renewed']) {
        assert.throws(
          () => readResult(impossible, 'billing', action),
          (e: unknown) =>
            e instanceof TypeError && e.message.includes(`cannot tell whether the lease for 'billing' was ${action}`),
          JSON.stringify(impossible),
        )
      }
    }
  })

  test('the claim token is the text of the first row, never a parsed Date', () => {
    assert.equal(readResult({ rowCount: 1, rows: [{ claimed_at: TOKEN }] }, 'j', 'claimed').claimToken, TOKEN)
    assert.equal(readResult({ rowCount: 1 }, 'j', 'claimed').claimToken, null)
    assert.equal(readResult({ rowCount: 1, rows: [{ claimed_at: new Date() }] }, 'j', 'claimed').claimToken, null)
    assert.equal(readResult({ rowCount: 1, rows: [{ claimed_at: '' }] }, 'j', 'claimed').claimToken, null)
    const text = '2026-11-29 22:12:11.5+00'
    assert.equal(readResult({ rows: [{ claimed_at: text }] }, 'j', 'claimed').claimToken, text)
  })
})

describe('what withCronLease does with each reading', () => {
  test('an unreadable result rejects and the tick does not run', async () => {
    for (const bad of [{}, null, 'ok', { rows: 'x' }]) {
      let ran = false
      await assert.rejects(
        withCronLease(
          standIn(() => bad),
          'report',
          1000,
          () => {
            ran = true
          },
        ),
        /cannot tell whether the lease for 'report' was claimed/,
      )
      assert.equal(ran, false)
    }
  })

  test('a result that reports more than one matched row rejects, and the tick does not run', async () => {
    const row = { claimed_at: TOKEN }
    for (const impossible of [
      { rowCount: 2, rows: [row, row] },
      { rowCount: 1e9, rows: [row] },
      { rows: [row, row] },
    ]) {
      let ran = false
      await assert.rejects(
        withCronLease(
          standIn(() => impossible),
          'report',
          1000,
          () => {
            ran = true
          },
        ),
        (e: unknown) =>
          e instanceof TypeError && e.message.includes("cannot tell whether the lease for 'report' was claimed"),
      )
      assert.equal(ran, false, JSON.stringify(impossible))
    }
  })

  test('a loss resolves { ran: false, result: null } and tells logger.debug', async () => {
    const lines: string[] = []
    const outcome = await withCronLease(
      standIn(() => ({ rowCount: 0, rows: [] })),
      'report',
      1000,
      () => 'x',
      { logger: { debug: (m) => lines.push(m) } },
    )
    assert.deepEqual(outcome, { ran: false, result: null })
    assert.equal(lines.length, 1)
    assert.match(lines[0] ?? '', /lease held by another replica/)
    assert.match(lines[0] ?? '', /'report'/)
  })

  test('a logger without debug, or no logger, is fine on a loss', async () => {
    const lose = standIn(() => ({ rows: [] }))
    assert.deepEqual(await withCronLease(lose, 'j', 1000, () => 1, { logger: {} }), { ran: false, result: null })
    assert.deepEqual(await withCronLease(lose, 'j', 1000, () => 1), { ran: false, result: null })
  })

  test('a claim that rejects propagates the same error and runs no tick', async () => {
    const boom = new Error('connection refused')
    let ran = false
    await assert.rejects(
      withCronLease(
        standIn(() => Promise.reject(boom)),
        'j',
        1000,
        () => {
          ran = true
        },
      ),
      (e) => e === boom,
    )
    assert.equal(ran, false)
  })

  test('a tick that throws propagates the same error, and no release statement is ever sent', async () => {
    const db = standIn()
    const boom = new Error('tick failed')
    await assert.rejects(
      withCronLease(db, 'j', 1000, () => {
        throw boom
      }),
      (e) => e === boom,
    )
    await assert.rejects(
      withCronLease(db, 'j', 1000, async () => Promise.reject(boom)),
      (e) => e === boom,
    )
    assert.equal(db.calls.length, 4)
    // Each call claims, then records the error; neither touches the lease.
    for (const [i, call] of db.calls.entries()) {
      assert.ok(i % 2 === 0 ? call.text === claimSql('cron_leases', 'history') : isRecord(call), call.text)
    }
  })

  test('a win runs the tick with its context and resolves its value', async () => {
    const outcome = await withCronLease(standIn(), 'j', 1234.4, (ctx) => ({ ...ctx }), { holder: 'me' })
    assert.equal(outcome.ran, true)
    assert.deepEqual(
      { ...outcome.result, renew: undefined, fence: undefined, signal: undefined },
      {
        jobName: 'j',
        holder: 'me',
        leaseMs: 1234,
        claimToken: TOKEN,
        occurrence: null,
        missed: 0,
        renew: undefined,
        fence: undefined,
        signal: undefined,
      },
    )
    assert.equal(typeof outcome.result.fence, 'function')
  })

  test('the default holder is hostname:pid', async () => {
    const db = standIn()
    const os = await import('node:os')
    await withCronLease(db, 'j', 1000, () => {})
    assert.equal(db.calls[0]?.params[2], `${os.hostname()}:${process.pid}`)
  })

  test('renew on a win without a token (rowCount-only driver) throws instead of extending', async () => {
    const db = standIn(() => ({ rowCount: 1 }))
    const { result } = await withCronLease(db, 'j', 1000, (ctx) => ctx.renew().then(String, (e: Error) => e))
    assert.ok(result instanceof TypeError)
    assert.match(result.message, /cannot renew the lease for 'j'/)
    assert.equal(db.calls.length, 1, 'no renew statement was sent')
  })

  test('a context kept after its tick settled cannot renew: renew rejects and sends nothing', async () => {
    const db = standIn()
    const { result: returned } = await withCronLease(db, 'j', 1000, (ctx) => ctx)
    let threw: LeaseContext | undefined
    await assert.rejects(
      withCronLease(db, 'j', 1000, (ctx) => {
        threw = ctx
        throw new Error('tick failed')
      }),
      /tick failed/,
    )
    for (const ctx of [returned, threw]) {
      await assert.rejects(
        ctx!.renew(600_000),
        (e: unknown) =>
          e instanceof Error &&
          /cannot renew the lease for 'j': its tick has settled/.test(e.message) &&
          /held until it expires/.test(e.message),
      )
    }
    assert.equal(db.calls.filter((call) => !isRecord(call)).length, 2, 'only the two claims were sent')
  })

  test('renew validates ms like leaseMs, before any query', async () => {
    const db = standIn()
    await withCronLease(db, 'j', 1000, async (ctx) => {
      for (const bad of [0, -1, Number.NaN, 'x', Infinity]) {
        await assert.rejects(ctx.renew(bad as number), /renew\(ms\) must be/)
      }
    })
    assert.equal(db.calls.filter((call) => !isRecord(call)).length, 1)
  })
})

describe('recording the outcome never holds the result hostage', () => {
  test('a record statement that never answers delays the result by at most RECORD_WAIT_MS', {
    timeout: 10_000,
  }, async () => {
    const db = standIn((call) => (isRecord(call) ? new Promise(() => {}) : WIN))
    // A real driver's socket keeps the process alive while a statement waits; the stand-in has none.
    const socket = setInterval(() => {}, 1000)
    const started = performance.now()
    try {
      assert.deepEqual(await withCronLease(db, 'j', 1000, () => 'ran'), { ran: true, result: 'ran' })
    } finally {
      clearInterval(socket)
    }
    assert.ok(performance.now() - started >= RECORD_WAIT_MS - 50, 'it did wait for the write first')
  })
})
