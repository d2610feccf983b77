/**
 * The cost of the channels when nobody listens: no message object is built and the tick runs
 * bare. The publishers take a function that builds the message, so the test counts its calls.
 */
import assert from 'node:assert/strict'
import diagnostics from 'node:diagnostics_channel'
import { describe, test } from 'node:test'
import {
  publishClaim,
  publishDrainAbort,
  publishLost,
  publishRenew,
  publishRunEnd,
  publishRunStart,
  traceTick,
} from '../../src/channels.ts'
import { CHANNELS, withCronLease } from '../../src/index.ts'
import { standIn } from '../helpers/stand-in.ts'

function counting<T>(message: T) {
  const factory = () => {
    factory.calls++
    return message
  }
  factory.calls = 0
  return factory
}

const CLAIM = { jobName: 'j', holder: 'h', won: true, claimToken: null }
const RUN = {}
const RENEW = { run: RUN, jobName: 'j', holder: 'h', renewed: true, ms: 5 }
const TICK = { run: RUN, jobName: 'j', holder: 'h', claimToken: null, leaseMs: 5 }

describe('nothing is built when nobody subscribes', () => {
  test('no channel has a subscriber to begin with', () => {
    assert.equal(diagnostics.hasSubscribers(CHANNELS.claim), false)
    assert.equal(diagnostics.hasSubscribers(CHANNELS.renew), false)
    assert.equal(diagnostics.tracingChannel(CHANNELS.tick).hasSubscribers, false)
    for (const name of [CHANNELS.runStart, CHANNELS.runEnd, CHANNELS.lost, CHANNELS.drainAbort]) {
      assert.equal(diagnostics.hasSubscribers(name), false, name)
    }
  })

  test('the run messages read nothing of the run until their channel has a subscriber', () => {
    let reads = 0
    const config = { jobName: 'j', holder: 'h', leaseMs: 5 }
    const run = Object.freeze({ jobName: 'j', claimToken: 't' })
    const fields: Record<string, unknown> = {
      run,
      config,
      claimToken: 't',
      occurrence: null,
      missed: 2,
      catchUp: false,
    }
    const ticket = new Proxy(fields, {
      get(target, key: string) {
        reads++
        return target[key]
      },
    }) as never
    const publishAll = () => {
      publishRunStart(ticket)
      publishRunEnd(ticket, { outcome: 'ok' }, 1.5)
      publishLost(ticket, 'it was released')
      publishDrainAbort(ticket, new Error('shutting down'))
    }
    publishAll()
    assert.equal(reads, 0)
    const received: [string, any][] = []
    const names = [CHANNELS.runStart, CHANNELS.runEnd, CHANNELS.lost, CHANNELS.drainAbort]
    const listeners = names.map((name) => (m: unknown) => received.push([name, m]))
    for (const [i, name] of names.entries()) diagnostics.subscribe(name, listeners[i]!)
    try {
      publishAll()
    } finally {
      for (const [i, name] of names.entries()) diagnostics.unsubscribe(name, listeners[i]!)
    }
    assert.ok(reads > 0)
    assert.deepEqual(
      received.map(([name, m]) => [name, m.run === run && JSON.stringify(m.run) !== undefined, m.jobName]),
      names.map((name) => [name, true, 'j']),
    )
    assert.deepEqual(received[0]![1].missed, 2)
    assert.deepEqual(received[1]![1].outcome, 'ok')
    assert.deepEqual(received[1]![1].durationMs, 1.5)
    assert.deepEqual(received[2]![1].reason, 'it was released')
  })

  test('claim and renew messages are built only while someone subscribes', () => {
    for (const [name, publish, message] of [
      [CHANNELS.claim, publishClaim, CLAIM],
      [CHANNELS.renew, publishRenew, RENEW],
    ] as const) {
      const factory = counting(message)
      publish(factory as never)
      assert.equal(factory.calls, 0, `${name}: no message without a subscriber`)
      const received: unknown[] = []
      const listener = (m: unknown) => received.push(m)
      diagnostics.subscribe(name, listener)
      publish(factory as never)
      diagnostics.unsubscribe(name, listener)
      publish(factory as never)
      assert.equal(factory.calls, 1, `${name}: built once, for the one publish that had a subscriber`)
      assert.deepEqual(received, [message])
    }
  })

  test('the tick runs bare, without building its context, until the tracing channel has a subscriber', async () => {
    const factory = counting(TICK)
    assert.equal(await traceTick(() => 'bare', factory), 'bare')
    const bare = traceTick(() => {
      throw new Error('sync')
    }, factory)
    await assert.rejects(bare, /sync/)
    assert.equal(factory.calls, 0)

    const tick = diagnostics.tracingChannel(CHANNELS.tick)
    const starts: unknown[] = []
    const handlers = { start: (m: unknown) => starts.push(m) }
    tick.subscribe(handlers as never)
    try {
      assert.equal(await traceTick(() => 'traced', factory), 'traced')
      // A synchronous throw is a rejection on both paths, never a synchronous exception.
      const traced = traceTick(() => {
        throw new Error('sync traced')
      }, factory)
      await assert.rejects(traced, /sync traced/)
    } finally {
      tick.unsubscribe(handlers as never)
    }
    assert.equal(factory.calls, 2)
    assert.equal(starts[0], TICK, 'the built context is the object subscribers receive')
    assert.equal(await traceTick(() => 'bare again', factory), 'bare again')
    assert.equal(factory.calls, 2)
  })

  test('a claim and tick with no subscriber publish nothing anywhere', async () => {
    const seen: string[] = []
    const all = (name: string) => (m: unknown) => seen.push(`${name}:${JSON.stringify(m)}`)
    // Subscribing to an unrelated channel must not switch these on.
    const other = all('other')
    diagnostics.subscribe('pg-cron-lease:other', other)
    try {
      const db = standIn()
      assert.deepEqual(await withCronLease(db, 'job', 1000, () => 'ran'), { ran: true, result: 'ran' })
    } finally {
      diagnostics.unsubscribe('pg-cron-lease:other', other)
    }
    assert.deepEqual(seen, [])
    assert.equal(diagnostics.hasSubscribers(CHANNELS.claim), false)
  })
})
