/** The dashboard token: a bearer header or the login cookie, compared in constant time, never logged. */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'

const COOKIE = 'pg_cron_lease_dashboard'

const digest = (text: string) => createHash('sha256').update(text).digest()

export interface Gate {
  /** Whether the request carries the token, as a bearer header or as the login cookie. */
  admits(req: IncomingMessage): boolean
  /** Whether it came with the bearer header, which a browser never adds by itself. */
  bearer(req: IncomingMessage): boolean
  /** Whether `given` is the token itself (the login form). */
  matches(given: string): boolean
  signIn(req: IncomingMessage, res: ServerResponse): void
  signOut(req: IncomingMessage, res: ServerResponse): void
}

export function gate(token: string): Gate {
  // Both sides are hashed first, so they have one length and the comparison takes the same time
  // whatever the guess; timingSafeEqual alone would leak the length.
  const expected = digest(token)
  const matches = (given: string) => timingSafeEqual(digest(given), expected)
  // The cookie holds a value derived from the token, not the token: a stolen cookie does not give
  // the bearer token away.
  const session = createHmac('sha256', token).update('pg-cron-lease dashboard session').digest('hex')
  const sessionDigest = digest(session)
  const bearerOf = (req: IncomingMessage) => /^Bearer +(.*\S)\s*$/i.exec(req.headers.authorization ?? '')?.[1]
  const cookieOf = (req: IncomingMessage) =>
    (req.headers.cookie ?? '')
      .split(';')
      .map((part) => part.trim().split('='))
      .find(([name]) => name === COOKIE)?.[1]
  // No Path: the browser scopes the cookie to the directory the login form posted from, which is
  // the dashboard's base path as the browser sees it, whatever a proxy in between did to it.
  const cookie = (req: IncomingMessage, value: string, maxAge: number) => {
    const https =
      (req.socket as { encrypted?: boolean }).encrypted === true || req.headers['x-forwarded-proto'] === 'https'
    return `${COOKIE}=${value}; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${https ? '; Secure' : ''}`
  }
  return {
    admits(req) {
      const bearer = bearerOf(req)
      if (bearer !== undefined) return matches(bearer)
      const value = cookieOf(req)
      return value !== undefined && timingSafeEqual(digest(value), sessionDigest)
    },
    bearer: (req) => bearerOf(req) !== undefined,
    matches,
    signIn: (req, res) => res.setHeader('Set-Cookie', cookie(req, session, 12 * 3600)),
    signOut: (req, res) => res.setHeader('Set-Cookie', cookie(req, '', 0)),
  }
}
