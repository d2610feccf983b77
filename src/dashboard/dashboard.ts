/** createDashboard: the jobs and their runs as pages and JSON, one Node request handler. */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { pauseJob, releaseLease, resumeJob } from '../admin.js'
import { jsonText } from '../human.js'
import { readLeases } from '../list-leases.js'
import { listRuns } from '../list-runs.js'
import { compileOptions } from '../options.js'
import { renderPrometheus } from '../prometheus.js'
import type { LeaseOptions, Queryable } from '../types.js'
import { DEFAULT_OVERDUE_FACTOR } from '../validate.js'
import { judgeJobs } from '../verdict.js'
import { type Gate, gate } from './auth.js'
import { asset, loginPage, secure, send, shell } from './page.js'

/**
 * Options for {@link createDashboard}.
 *
 * @example
 * const opts: DashboardOptions = { db: pool, basePath: '/cron', token: process.env.DASHBOARD_TOKEN }
 */
export interface DashboardOptions extends Pick<LeaseOptions, 'table'> {
  /** A pool (`pg.Pool` or any `{ query }`): the dashboard queries it on every request. */
  db: Queryable
  /**
   * The path the dashboard is served under when requests still carry it (a proxy that keeps the
   * prefix): it is stripped when present. Not needed under Express's `app.use('/cron', …)` or a
   * proxy that strips the prefix. Default `/`.
   */
  basePath?: string
  /** When set, every page and endpoint needs it: `Authorization: Bearer …` or the login form's cookie. */
  token?: string
  /** Show pause, resume and release and accept their POSTs; needs `token` too. Default `false`. */
  allowActions?: boolean
}

/**
 * A Node request handler, `(req, res, next?)`: for `http.createServer`, Express and NestJS
 * middleware. A path it does not serve goes to `next` when given, else gets a 404.
 *
 * @example
 * http.createServer(createDashboard({ db: pool })).listen(8080, '127.0.0.1')
 */
export type DashboardHandler = (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void) => void

const JSON_TYPE = 'application/json; charset=utf-8'
const TEXT_TYPE = 'text/plain; charset=utf-8'
const HTML_TYPE = 'text/html; charset=utf-8'
const ACTIONS = { pause: pauseJob, resume: resumeJob, release: releaseLease } as const
const BODY_LIMIT = 4096

/**
 * The dashboard of one lease table: the jobs page, a page per job, `/api/jobs`,
 * `/api/jobs/:name/runs`, `/metrics` and `/healthz` (docs/dashboard.md). Read-only unless
 * `allowActions` and `token` are both given.
 *
 * @example
 * app.use('/cron', createDashboard({ db: pool, token: process.env.DASHBOARD_TOKEN, allowActions: true }))
 */
export function createDashboard(opts: DashboardOptions): DashboardHandler {
  const { db, table, basePath, token, allowActions } = compileOptions('createDashboard', opts)
  const site: Site = {
    db: db as Queryable,
    table,
    basePath,
    guard: token === undefined ? undefined : gate(token),
    actions: allowActions && token !== undefined,
  }
  return (req, res, next) => {
    secure(res)
    serve(site, req, res, next).catch((error: unknown) => {
      if (res.headersSent) return void res.destroy()
      const message = error instanceof Error ? error.message : String(error)
      send(res, 500, JSON_TYPE, jsonText({ error: message }))
    })
  }
}

interface Site {
  db: Queryable
  table: string
  basePath: string
  guard: Gate | undefined
  actions: boolean
}

async function serve(site: Site, req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void) {
  const { guard, table } = site
  // Only the path and the query are read: the base is a placeholder, never a request.
  const url = new URL(req.url ?? '/', 'http://localhost')
  const { basePath } = site
  let path = url.pathname
  if (basePath !== '' && (path === basePath || path.startsWith(`${basePath}/`))) path = path.slice(basePath.length)
  // The page's URLs are relative, so the page itself must end in '/': '/cron' would load '/app.js'.
  const outer = new URL((req as { originalUrl?: string }).originalUrl ?? req.url ?? '/', url).pathname
  if ((path === '' || path === '/') && !outer.endsWith('/')) {
    res.setHeader('Location', `${outer.slice(outer.lastIndexOf('/') + 1)}/${url.search}`)
    return send(res, 308, TEXT_TYPE, 'The dashboard is one level down: add a trailing slash.\n')
  }
  const method = req.method === 'HEAD' ? 'GET' : req.method
  if (path === '' || path === '/') path = '/'

  const file = method === 'GET' ? asset(path.slice(1)) : undefined
  // The assets hold no data, and the login page needs its style.
  if (file !== undefined) {
    res.setHeader('Cache-Control', 'no-cache')
    return send(res, 200, file.type, file.body)
  }
  if (method === 'POST' && (path === '/login' || path === '/logout')) {
    if (guard === undefined || !sameOrigin(req, guard, false)) return seeOther(res)
    if (path === '/logout') {
      guard.signOut(req, res)
      return seeOther(res)
    }
    const given = new URLSearchParams(await readBody(req)).get('token') ?? ''
    if (!guard.matches(given)) return send(res, 401, HTML_TYPE, loginPage(table, true))
    guard.signIn(req, res)
    return seeOther(res)
  }

  const job = /^\/api\/jobs\/([^/]+)\/(runs|pause|resume|release)$/.exec(path)
  const action = job?.[2] === 'runs' ? undefined : (job?.[2] as keyof typeof ACTIONS | undefined)
  // Refused before anything else, so a read-only dashboard never acts whoever asks.
  if (method === 'POST' && action !== undefined && !site.actions) {
    return fail(res, 403, 'actions are off: start the dashboard with allowActions (--allow-actions) and a token')
  }
  const known = path === '/' || path === '/api/jobs' || path === '/metrics' || path === '/healthz' || job !== null
  if (!known) return next ? next() : send(res, 404, TEXT_TYPE, 'Not found\n')
  if (guard !== undefined && !guard.admits(req)) {
    if (path === '/' && method === 'GET') return send(res, 401, HTML_TYPE, loginPage(table, false))
    res.setHeader('WWW-Authenticate', 'Bearer realm="pg-cron-lease dashboard"')
    return fail(res, 401, 'this dashboard needs its token: send Authorization: Bearer <token>, or sign in at its page')
  }
  const name = job === null ? '' : decoded(job[1]!)
  if (name === undefined) return fail(res, 400, 'the job name in the path is not valid percent-encoded UTF-8')
  if (method === 'POST' && action !== undefined) {
    if (!sameOrigin(req, guard!, true)) return fail(res, 403, 'the Origin of this request is not the dashboard')
    const changed = await act(() => ACTIONS[action](site.db, name, { table, ...actionOptions(action, req) }))
    if (typeof changed === 'string') return fail(res, 400, changed)
    return send(res, changed ? 200 : 404, JSON_TYPE, jsonText({ jobName: name, action, changed }))
  }
  if (method !== 'GET') {
    res.setHeader('Allow', 'GET')
    return fail(res, 405, `${method} is not served here`)
  }
  if (path === '/') return send(res, 200, HTML_TYPE, shell(table, site.actions, guard !== undefined))
  await reply(res, path, () => read(site, path, name, url.searchParams))
}

type Reply = { status: number; type: string; body: string }

async function read(site: Site, path: string, name: string, query: URLSearchParams): Promise<Reply> {
  const { db, table } = site
  if (path !== '/api/jobs' && path !== '/metrics' && path !== '/healthz') {
    const limit = query.get('limit')
    const before = query.get('before')
    const runs = await listRuns(db, {
      table,
      jobName: name,
      // A malformed value goes on as text, for listRuns' own TypeError (a 400) to name.
      ...(limit !== null && { limit: (/^\d+$/.test(limit) ? Number(limit) : limit) as number }),
      ...(before !== null && { before }),
    })
    return { status: 200, type: JSON_TYPE, body: jsonText(runs) }
  }
  const { leases, checkedAt } = await readLeases(db, { table })
  if (path === '/api/jobs') return { status: 200, type: JSON_TYPE, body: jsonText(leases) }
  if (path === '/metrics')
    return { status: 200, type: 'text/plain; version=0.0.4; charset=utf-8', body: renderPrometheus(leases) }
  const verdict = judgeJobs({ leases, jobs: [], table, overdueFactor: DEFAULT_OVERDUE_FACTOR, checkedAt })
  return { status: verdict.healthy ? 200 : 503, type: JSON_TYPE, body: jsonText(verdict) }
}

// A database that cannot be reached is a 503 the page shows as stale data; a bad argument a 400.
async function reply(res: ServerResponse, path: string, work: () => Promise<Reply>) {
  let answer: Reply
  try {
    answer = await work()
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error)
    const status =
      error instanceof TypeError && /must be/.test(message) ? 400 : /has no run history/.test(message) ? 404 : 503
    const body = path === '/healthz' ? { healthy: false, error: message } : { error: message }
    return send(
      res,
      status,
      path === '/metrics' ? TEXT_TYPE : JSON_TYPE,
      path === '/metrics' ? `# ${message}\n` : jsonText(body),
    )
  }
  send(res, answer.status, answer.type, answer.body)
}

async function act(work: () => Promise<boolean>): Promise<boolean | string> {
  try {
    return await work()
  } catch (error) {
    if (error instanceof TypeError) return error.message
    throw error
  }
}

/** A pause takes `?forMs=` or `?until=`; without either it lasts until resumed. */
function actionOptions(action: string, req: IncomingMessage) {
  if (action !== 'pause') return {}
  const query = new URL(req.url ?? '/', 'http://localhost').searchParams
  const forMs = query.get('forMs')
  const until = query.get('until')
  return {
    // A malformed value goes on as text, for pauseJob's own TypeError to name.
    ...(forMs !== null && { forMs: (/^\d+$/.test(forMs) ? Number(forMs) : forMs) as number }),
    ...(until !== null && { until }),
  }
}

/**
 * A browser always sends Origin with a POST; it must be this host. Without one, only a request
 * with the bearer header passes (curl, scripts): a browser cannot be made to add it cross-site.
 */
function sameOrigin(req: IncomingMessage, guard: Gate, strict: boolean): boolean {
  const origin = req.headers.origin
  if (req.headers['sec-fetch-site'] === 'cross-site') return false
  if (origin === undefined) return !strict || guard.bearer(req)
  const host = req.headers['x-forwarded-host'] ?? req.headers.host
  try {
    return new URL(origin).host === host
  } catch {
    return false
  }
}

function decoded(text: string): string | undefined {
  try {
    return decodeURIComponent(text)
  } catch {
    return undefined
  }
}

function seeOther(res: ServerResponse) {
  res.setHeader('Location', './')
  send(res, 303, TEXT_TYPE, 'See ./\n')
}

function fail(res: ServerResponse, status: number, error: string) {
  send(res, status, JSON_TYPE, jsonText({ error }))
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (chunk: string) => {
      body += chunk
      if (body.length > BODY_LIMIT) req.destroy(new Error('request body too large'))
    })
    req.on('end', () => resolve(body))
    req.on('error', reject)
  })
}
