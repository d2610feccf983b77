/**
 * The dashboard's gate on a clock the test moves: sessions end on the server after 12 hours
 * whatever the browser keeps, and lockouts after wrong tokens end, then grow for a repeat offender.
 */
import assert from 'node:assert/strict'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { describe, test } from 'node:test'
import {
  FAILURE_WINDOW_MS,
  gate,
  LOCKOUT_MS,
  MAX_FAILURES,
  MAX_SESSIONS,
  SESSION_MS,
} from '../../src/dashboard/auth.ts'

const TOKEN = 'a token of some length'

function request(headers: Record<string, string> = {}, remoteAddress = '10.0.0.1'): IncomingMessage {
  return { headers, socket: { remoteAddress } } as unknown as IncomingMessage
}

/** Signs in and returns the cookie's name=value. */
function signIn(g: ReturnType<typeof gate>): string {
  let cookie = ''
  g.signIn(request(), { setHeader: (_: string, value: string) => (cookie = value) } as unknown as ServerResponse)
  return cookie.split(';')[0]!
}

describe('sessions end on the server', () => {
  test('a session admits until 12 hours have passed, then never again', () => {
    let now = 0
    const g = gate(TOKEN, () => now)
    const cookie = signIn(g)
    now = SESSION_MS - 1
    assert.equal(g.admit(request({ cookie })), true)
    now = SESSION_MS
    assert.equal(g.admit(request({ cookie })), false)
    now = 0
    assert.equal(g.admit(request({ cookie })), false, 'an expired session is gone, not merely hidden')
  })

  test('past the bound the oldest session is dropped, and the newest kept', () => {
    const g = gate(TOKEN, () => 0)
    const first = signIn(g)
    let last = first
    for (let i = 0; i < MAX_SESSIONS; i++) last = signIn(g)
    assert.equal(g.admit(request({ cookie: first })), false)
    assert.equal(g.admit(request({ cookie: last })), true)
  })
})

describe('wrong tokens lock an address out, for longer each time', () => {
  test('five wrong within a minute lock it for a minute; the next five for two', () => {
    let now = 0
    const g = gate(TOKEN, () => now)
    const wrong = (times: number) => {
      for (let i = 0; i < times; i++) assert.equal(g.matches(request(), 'wrong'), false)
    }
    wrong(MAX_FAILURES - 1)
    now = FAILURE_WINDOW_MS + 1
    wrong(1)
    assert.equal(g.lockedFor(request()), 0, 'failures older than a minute do not count')
    wrong(MAX_FAILURES - 1)
    assert.equal(g.lockedFor(request()), LOCKOUT_MS / 1000)
    assert.equal(g.lockedFor(request({}, '10.0.0.2')), 0, 'another address is not locked')
    assert.equal(g.admit(request({ authorization: `Bearer ${TOKEN}` })), LOCKOUT_MS / 1000, 'not even the token')
    now += LOCKOUT_MS
    assert.equal(g.lockedFor(request()), 0)
    wrong(MAX_FAILURES)
    assert.equal(g.lockedFor(request()), (2 * LOCKOUT_MS) / 1000)
    now += 2 * LOCKOUT_MS
    assert.equal(g.matches(request(), TOKEN), true)
    wrong(MAX_FAILURES)
    assert.equal(g.lockedFor(request()), LOCKOUT_MS / 1000, 'the right token clears the record')
  })
})
