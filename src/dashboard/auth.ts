/** The dashboard token and its sessions: a bearer header or a login cookie, compared in constant time; wrong tokens limited. */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'

const COOKIE = 'pg_cron_lease_dashboard'
export const SESSION_MS = 12 * 3600_000
// Past MAX_SESSIONS the oldest session is dropped; past MAX_CLIENTS, the address seen longest ago.
export const MAX_SESSIONS = 1000
// MAX_FAILURES wrong tokens within the window lock an address out; each next lockout lasts twice as long.
export const MAX_FAILURES = 5
export const FAILURE_WINDOW_MS = 60_000
export const LOCKOUT_MS = 60_000
const MAX_LOCKOUT_MS = 3600_000
const MAX_CLIENTS = 10_000

const digest = (text: string) => createHash('sha256').update(text).digest()
const hex = (text: string) => digest(text).toString('hex')

export function forwardedProto(req: IncomingMessage): string {
  const said = [req.headers['x-forwarded-proto']].flat()[0]?.split(',')[0]?.trim().toLowerCase()
  return said || ((req.socket as { encrypted?: boolean }).encrypted === true ? 'https' : 'http')
}

/** The gate for one token. Sessions live in this process only: a restart signs everyone out. */
export function gate(token: string, monotonicMs: () => number = () => performance.now()) {
  // Hashed first: one length, so timingSafeEqual does not leak the token's.
  const expected = digest(token)
  // Keyed by the id's hash: a lookup's timing then says nothing of how much of a guessed id matches.
  const sessions = new Map<string, number>()
  const clients = new Map<string, { failures: number[]; lockouts: number; until: number }>()
  const bearerOf = (req: IncomingMessage) => /^Bearer +(.*\S)\s*$/i.exec(req.headers.authorization ?? '')?.[1]
  const cookieOf = (req: IncomingMessage) =>
    (req.headers.cookie ?? '')
      .split(';')
      .map((part) => part.trim().split('='))
      .find(([name]) => name === COOKIE)?.[1]
  // No Path: the browser scopes it to the login form's directory, the base path as it sees it, whatever a proxy did.
  const cookie = (req: IncomingMessage, value: string, maxAgeS: number) =>
    `${COOKIE}=${value}; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${forwardedProto(req) === 'https' ? '; Secure' : ''}`
  const addressOf = (req: IncomingMessage) => req.socket.remoteAddress ?? ''

  const lockedFor = (req: IncomingMessage) => {
    const until = clients.get(addressOf(req))?.until ?? 0
    return until > monotonicMs() ? Math.ceil((until - monotonicMs()) / 1000) : 0
  }
  const matches = (req: IncomingMessage, given: string) => {
    const address = addressOf(req)
    if (timingSafeEqual(digest(given), expected)) {
      clients.delete(address)
      return true
    }
    const at = monotonicMs()
    const client = clients.get(address) ?? { failures: [], lockouts: 0, until: 0 }
    client.failures = client.failures.filter((t) => t > at - FAILURE_WINDOW_MS)
    client.failures.push(at)
    if (client.failures.length >= MAX_FAILURES) {
      client.lockouts++
      client.until = at + Math.min(LOCKOUT_MS * 2 ** (client.lockouts - 1), MAX_LOCKOUT_MS)
      client.failures = []
    }
    // Re-inserted, so the Map's order is the order of last failure and the first is the stalest.
    clients.delete(address)
    if (clients.size >= MAX_CLIENTS) clients.delete(clients.keys().next().value!)
    clients.set(address, client)
    return false
  }
  const live = (id: string | undefined) => {
    if (id === undefined) return false
    const until = sessions.get(hex(id)) ?? 0
    if (until > monotonicMs()) return true
    sessions.delete(hex(id))
    return false
  }
  return {
    /** Admitted (`true`), not (`false`), or the seconds this address must wait after too many wrong tokens. */
    admit(req: IncomingMessage): boolean | number {
      const bearer = bearerOf(req)
      // A session is never locked out: a guesser on the same address cannot sign others out.
      if (bearer === undefined) return live(cookieOf(req))
      const wait = lockedFor(req)
      return wait > 0 ? wait : matches(req, bearer)
    },
    /** Whether it came with the bearer header, which a browser never adds by itself. */
    bearer: (req: IncomingMessage) => bearerOf(req) !== undefined,
    lockedFor,
    matches,
    signIn(req: IncomingMessage, res: ServerResponse) {
      const at = monotonicMs()
      for (const [key, until] of sessions) if (until <= at) sessions.delete(key)
      if (sessions.size >= MAX_SESSIONS) sessions.delete(sessions.keys().next().value!)
      const id = randomBytes(32).toString('base64url')
      sessions.set(hex(id), at + SESSION_MS)
      res.setHeader('Set-Cookie', cookie(req, id, SESSION_MS / 1000))
    },
    signOut(req: IncomingMessage, res: ServerResponse) {
      const id = cookieOf(req)
      if (id !== undefined) sessions.delete(hex(id))
      res.setHeader('Set-Cookie', cookie(req, '', 0))
    },
  }
}
