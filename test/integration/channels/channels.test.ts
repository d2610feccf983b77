/**
 * The diagnostics_channel contract, observed the way a user (or an APM tool) would: subscribe by
 * channel name, run claims against real Postgres, and check every message's shape and order.
 */
import assert from 'node:assert/strict'
import { AsyncLocalStorage } from 'node:async_hooks'
import diagnostics from 'node:diagnostics_channel'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { CHANNELS, type ClaimMessage, listLeases, type RenewMessage, withCronLease } from '../../../src/index.ts'

const TOKEN = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/
const TICK_EVENTS = ['start', 'end', 'asyncStart', 'asyncEnd', 'error'] as const
type TickEvent = (typeof TICK_EVENTS)[number]

let pool: pg.Pool
let table: string
before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'channels')
})
after(async () => {
  await pool.end()
})

/**
 * Subscribes to all three channels for the duration of `body`, recording every message in one
 * ordered log, and always unsubscribes.
 */
async function observe<T>(body: (log: [string, any][]) => Promise<T>): Promise<{ log: [string, any][]; value: T }> {
  const log: [string, any][] = []
  const onClaim = (m: unknown) => log.push(['claim', m])
  const onRenew = (m: unknown) => log.push(['renew', m])
  const tick = diagnostics.tracingChannel(CHANNELS.tick)
  const handlers: Record<TickEvent, (m: unknown) => void> = {
    start: (m) => log.push(['tick:start', m]),
    end: (m) => log.push(['tick:end', m]),
    asyncStart: (m) => log.push(['tick:asyncStart', m]),
    asyncEnd: (m) => log.push(['tick:asyncEnd', m]),
    error: (m) => log.push(['tick:error', m]),
  }
  diagnostics.subscribe(CHANNELS.claim, onClaim)
  diagnostics.subscribe(CHANNELS.renew, onRenew)
  tick.subscribe(handlers)
  try {
    return { log, value: await body(log) }
  } finally {
    diagnostics.unsubscribe(CHANNELS.claim, onClaim)
    diagnostics.unsubscribe(CHANNELS.renew, onRenew)
    tick.unsubscribe(handlers)
  }
}

const names = (log: [string, any][]) => log.map(([name]) => name)

/** A message without its `run` (the run's identity object, checked to be there). */
function bare({ run, ...rest }: Record<string, any>) {
  assert.equal(typeof run, 'object', 'the message names its run')
  return rest
}

/** Makes the lease of `jobName` claimable again, as if it had run out. */
const expire = (jobName: string) => expireLease(pool, table, jobName)

describe('the channel names are the contract', () => {
  test('claim, renew and tick are named pg-cron-lease:*', () => {
    assert.deepEqual(CHANNELS, {
      claim: 'pg-cron-lease:claim',
      renew: 'pg-cron-lease:renew',
      tick: 'pg-cron-lease:tick',
      runStart: 'pg-cron-lease:run:start',
      runEnd: 'pg-cron-lease:run:end',
      lost: 'pg-cron-lease:lost',
      drainAbort: 'pg-cron-lease:drain-abort',
    })
  })
})

describe('pg-cron-lease:claim reports every claim the database answered', () => {
  test('a win publishes { jobName, holder, won: true, claimToken } before the tick starts', async () => {
    let seenByTick: string | null = null
    const { log } = await observe(() =>
      withCronLease(
        pool,
        'claim:win',
        60_000,
        (ctx) => {
          seenByTick = ctx.claimToken
        },
        { table, holder: 'replica-a' },
      ),
    )
    assert.deepEqual(names(log), ['claim', 'tick:start', 'tick:end', 'tick:asyncStart', 'tick:asyncEnd'])
    const { clockOffsetMs, ...message } = log[0]![1] as ClaimMessage
    assert.deepEqual(message, { jobName: 'claim:win', holder: 'replica-a', won: true, claimToken: seenByTick })
    assert.ok(typeof clockOffsetMs === 'number' && Math.abs(clockOffsetMs) < 1000, `same machine: ${clockOffsetMs}`)
    assert.match(message.claimToken!, TOKEN)
    const [row] = (await listLeases(pool, { table })).filter((l) => l.jobName === 'claim:win')
    assert.equal(message.claimToken, row!.claimedAt, 'the token is the claimed_at the row holds')
  })

  test('a loss publishes { won: false, claimToken: null, clockOffsetMs: null } and nothing else', async () => {
    await withCronLease(pool, 'claim:loss', 60_000, () => {}, { table, holder: 'replica-a' })
    let ran = false
    const { log } = await observe(() =>
      withCronLease(
        pool,
        'claim:loss',
        60_000,
        () => {
          ran = true
        },
        { table, holder: 'replica-b' },
      ),
    )
    assert.equal(ran, false)
    assert.deepEqual(log, [
      ['claim', { jobName: 'claim:loss', holder: 'replica-b', won: false, claimToken: null, clockOffsetMs: null }],
    ])
  })

  test('a claim the database rejects publishes nothing (the error reaches the caller instead)', async () => {
    const { log } = await observe(async () => {
      await assert.rejects(
        withCronLease(pool, 'claim:error', 1000, () => {}, { table: 'no_such_table' }),
        {
          code: '42P01',
        },
      )
    })
    assert.deepEqual(log, [])
  })
})

describe('pg-cron-lease:renew reports every renew and keep-alive beat the database answered', () => {
  test('renew(ms) and renew() publish { jobName, holder, renewed: true, ms } with the extension asked for', async () => {
    const { log } = await observe(() =>
      withCronLease(
        pool,
        'renew:manual',
        60_000,
        async (ctx) => {
          assert.equal(await ctx.renew(90_000), true)
          assert.equal(await ctx.renew(), true)
        },
        { table, holder: 'replica-a' },
      ),
    )
    const renews = log.filter(([name]) => name === 'renew').map(([, m]) => m as RenewMessage)
    assert.deepEqual(renews.map(bare), [
      { jobName: 'renew:manual', holder: 'replica-a', renewed: true, ms: 90_000 },
      { jobName: 'renew:manual', holder: 'replica-a', renewed: true, ms: 60_000 },
    ])
    assert.deepEqual(names(log).slice(0, 4), ['claim', 'tick:start', 'tick:end', 'renew'])
  })

  test('a renew after another claim replaced this one publishes renewed: false', async () => {
    const { log } = await observe(() =>
      withCronLease(
        pool,
        'renew:lost',
        60_000,
        async (ctx) => {
          await expire('renew:lost')
          const other = await withCronLease(pool, 'renew:lost', 60_000, () => 'other', { table, holder: 'replica-b' })
          assert.equal(other.ran, true)
          assert.equal(await ctx.renew(5_000), false)
          assert.equal(ctx.signal.aborted, true)
        },
        { table, holder: 'replica-a' },
      ),
    )
    const messages = log.filter(([name]) => name === 'claim' || name === 'renew')
    assert.deepEqual(
      messages.map(([name, m]) => [name, m.holder, m.won ?? m.renewed]),
      [
        ['claim', 'replica-a', true],
        ['claim', 'replica-b', true],
        ['renew', 'replica-a', false],
      ],
    )
    assert.deepEqual(bare(messages[2]![1]), { jobName: 'renew:lost', holder: 'replica-a', renewed: false, ms: 5_000 })
  })

  test('a keep-alive beat publishes { renewed: true, ms: extendMs }, and beats stop with the tick', async () => {
    let resolveBeat!: (m: RenewMessage) => void
    let rejectBeat!: (e: Error) => void
    const firstBeat = new Promise<RenewMessage>((resolve, reject) => {
      resolveBeat = resolve
      rejectBeat = reject
    })
    const onRenew = (m: unknown) => resolveBeat(m as RenewMessage)
    diagnostics.subscribe(CHANNELS.renew, onRenew)
    let afterTick: number
    try {
      const { log } = await observe(async (log) => {
        await withCronLease(
          pool,
          'renew:beat',
          10_000,
          async () => {
            // Bounded: the beat is due after 50 ms; 20 s allows for a very busy machine.
            const timer = setTimeout(() => rejectBeat(new Error('no keep-alive beat within 20 s')), 20_000)
            try {
              await firstBeat
            } finally {
              clearTimeout(timer)
            }
          },
          { table, holder: 'replica-a', keepAlive: { beatMs: 50, extendMs: 5_000 } },
        )
        afterTick = log.length
        await new Promise((resolve) => setTimeout(resolve, 300))
        return log
      })
      assert.deepEqual(bare(await firstBeat), { jobName: 'renew:beat', holder: 'replica-a', renewed: true, ms: 5_000 })
      assert.ok(names(log).includes('renew'))
      assert.equal(log.length, afterTick!, 'no beat after the tick settled')
    } finally {
      diagnostics.unsubscribe(CHANNELS.renew, onRenew)
    }
  })
})

describe('the run channels: run:start after the claim, run:end last, one run object throughout', () => {
  test('a won claim publishes claim, run:start, the tick, its renews, then run:end once its outcome is recorded', async () => {
    const log: [string, any][] = []
    const listen = (name: string) => (m: unknown) => log.push([name, m])
    const listeners = [CHANNELS.claim, CHANNELS.runStart, CHANNELS.renew, CHANNELS.runEnd].map(
      (name) => [name, listen(name)] as const,
    )
    const tick = diagnostics.tracingChannel(CHANNELS.tick)
    const handlers = { start: listen('tick:start'), asyncEnd: listen('tick:asyncEnd') }
    for (const [name, listener] of listeners) diagnostics.subscribe(name, listener)
    tick.subscribe(handlers as never)
    const occurrence = new Date(Math.floor(Date.now() / 1000) * 1000)
    try {
      await withCronLease(pool, 'run:order', 30_000, (ctx) => ctx.renew(), { table, holder: 'replica-a', occurrence })
    } finally {
      for (const [name, listener] of listeners) diagnostics.unsubscribe(name, listener)
      tick.unsubscribe(handlers as never)
    }
    assert.deepEqual(names(log), [
      'pg-cron-lease:claim',
      'pg-cron-lease:run:start',
      'tick:start',
      'pg-cron-lease:renew',
      'tick:asyncEnd',
      'pg-cron-lease:run:end',
    ])
    const [, start] = log[1]!
    for (const [, m] of log.slice(1)) assert.equal(m.run, start.run, 'one run object in every message')
    assert.deepEqual(bare(start), {
      jobName: 'run:order',
      holder: 'replica-a',
      claimToken: log[0]![1].claimToken,
      leaseMs: 30_000,
      occurrence,
      missed: 0,
      catchUp: false,
    })
    const end = bare(log[5]![1])
    assert.ok(end.durationMs >= 0)
    assert.deepEqual(
      { ...end, durationMs: 0 },
      {
        jobName: 'run:order',
        holder: 'replica-a',
        claimToken: start.claimToken,
        outcome: 'ok',
        error: undefined,
        durationMs: 0,
      },
    )
    const [row] = (await listLeases(pool, { table })).filter((l) => l.jobName === 'run:order')
    assert.equal(row!.lastOutcome, 'ok', 'recorded before run:end')
  })
})

describe('pg-cron-lease:tick traces the tick as a TracingChannel (tracePromise)', () => {
  test('a tick that returns: start, end, asyncStart, asyncEnd on one context that gains result', async () => {
    let eventsWhenTickRan = -1
    const { log, value } = await observe((log) =>
      withCronLease(
        pool,
        'tick:ok',
        30_000,
        (ctx) => {
          eventsWhenTickRan = log.length
          return { rows: 3, token: ctx.claimToken }
        },
        { table, holder: 'replica-a' },
      ),
    )
    const ticks = log.filter(([name]) => name.startsWith('tick:'))
    assert.deepEqual(names(ticks), ['tick:start', 'tick:end', 'tick:asyncStart', 'tick:asyncEnd'])
    assert.equal(eventsWhenTickRan, 2, 'the tick runs after claim and start, before end')
    const context = ticks[0]![1]
    for (const [, m] of ticks) assert.equal(m, context, 'every event carries the same context object')
    assert.deepEqual(bare(context), {
      jobName: 'tick:ok',
      holder: 'replica-a',
      claimToken: value.result!.token,
      leaseMs: 30_000,
      result: value.result,
    })
  })

  for (const [kind, runTick] of [
    [
      'an async tick that rejects',
      async () => {
        await Promise.resolve()
        throw new Error('boom')
      },
    ],
    [
      'a synchronous tick that throws',
      () => {
        throw new Error('boom')
      },
    ],
  ] as const) {
    test(`${kind}: start, end, error, asyncStart, asyncEnd with the error, and the lease stays held`, async () => {
      const jobName = `tick:throws:${kind.split(' ')[1]}`
      let thrown: unknown
      const { log } = await observe(async () => {
        await assert.rejects(withCronLease(pool, jobName, 30_000, runTick, { table, holder: 'replica-a' }), (e) => {
          thrown = e
          return e instanceof Error && e.message === 'boom'
        })
      })
      const ticks = log.filter(([name]) => name.startsWith('tick:'))
      assert.deepEqual(names(ticks), ['tick:start', 'tick:end', 'tick:error', 'tick:asyncStart', 'tick:asyncEnd'])
      const context = ticks[0]![1]
      for (const [, m] of ticks) assert.equal(m, context)
      assert.equal(context.error, thrown, 'the context carries the very error the caller got')
      assert.ok(!('result' in context))
      assert.deepEqual(
        { ...bare(context), error: undefined },
        { jobName, holder: 'replica-a', claimToken: context.claimToken, leaseMs: 30_000, error: undefined },
      )
      assert.match(context.claimToken, TOKEN)
      const [row] = (await listLeases(pool, { table })).filter((l) => l.jobName === jobName)
      assert.equal(row!.held, true, 'a tick that throws keeps its lease')
    })
  }

  test('an AsyncLocalStorage bound to start is the active store inside the tick (how APM tools make spans)', async () => {
    const spans = new AsyncLocalStorage<{ name: string; token: string | null }>()
    const start = diagnostics.tracingChannel(CHANNELS.tick).start
    start.bindStore(spans, (m: any) => ({ name: `cron ${m.jobName}`, token: m.claimToken }))
    try {
      const outcome = await withCronLease(
        pool,
        'tick:store',
        30_000,
        async (ctx) => {
          await new Promise((resolve) => setImmediate(resolve))
          return { store: spans.getStore(), token: ctx.claimToken }
        },
        { table },
      )
      assert.deepEqual(outcome.result!.store, { name: 'cron tick:store', token: outcome.result!.token })
      assert.equal(spans.getStore(), undefined, 'the store does not leak out of the tick')
    } finally {
      start.unbindStore(spans)
    }
  })
})
