/** createDashboard: the jobs and their runs as pages and JSON, one Node request handler. */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { pauseJob, releaseLease, resumeJob } from '../admin.js'
import { ERROR_CODES } from '../errors.js'
import { messageOf } from '../format-value.js'
import { jsonText } from '../human.js'
import { listRuns, readLeases } from '../listings.js'
import { compileOptions } from '../options.js'
import { renderPrometheus } from '../prometheus.js'
import type { LeaseOptions, Queryable } from '../types.js'
import { checkJobs } from '../verdict.js'
import { forwardedProto, gate } from './auth.js'
import { asset, loginPage, secure, send, shell } from './page.js'

/** Options for {@link createDashboard}. */
export interface DashboardOptions extends Pick<LeaseOptions, 'table'> {
  /** A pool (`pg.Pool` or any `{ query }`): the dashboard queries it on every request. */
  db: Queryable
  /** The prefix requests still carry (a proxy that keeps it), stripped when present; not for `app.use('/cron', …)`. Default `/`. */
  basePath?: string
  /** When set (16 characters at least), every page and endpoint needs it: as a bearer header or by the login form. */
  token?: string
  /** Without a token, `Host` names answered besides localhost, 127.0.0.1 and [::1]; others get 421 (DNS rebinding). Default `[]`. */
  allowedHosts?: string[]
  /** Show pause, resume and release and accept their POSTs; needs `token` too. Default `false`. */
  allowActions?: boolean
}

/** A request handler for `http.createServer`, Express or NestJS; a path it does not serve goes to `next`, else 404. */
export type DashboardHandler = (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void) => void

const JSON_TYPE = 'application/json; charset=utf-8'
const TEXT_TYPE = 'text/plain; charset=utf-8'
const HTML_TYPE = 'text/html; charset=utf-8'
const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8'
const ACTIONS = { pause: pauseJob, resume: resumeJob, release: releaseLease } as const

/**
 * The pages, JSON, `/metrics` and `/healthz` of one lease table (docs/dashboard.md); read-only unless `allowActions` and `token`.
 * @example app.use('/cron', createDashboard({ db: pool, token: process.env.DASHBOARD_TOKEN, allowActions: true }))
 */
export function createDashboard(opts: DashboardOptions): DashboardHandler {
  const site = siteOf(opts)
  return (req, res, next) => {
    serve(site, req, res, next).catch((error: unknown) => {
      if (res.headersSent) return void res.destroy()
      fail(res, 500, messageOf(error))
    })
  }
}

function siteOf(opts: DashboardOptions) {
  const { db, table, basePath, token, allowActions, allowedHosts } = compileOptions('createDashboard', opts)
  return {
    db,
    table,
    basePath,
    guard: token === undefined ? undefined : gate(token),
    actions: allowActions && token !== undefined,
    hosts: new Set(['localhost', '127.0.0.1', '[::1]', ...allowedHosts]),
    ...readers(2),
  }
}

type Site = ReturnType<typeof siteOf>

// Shared in flight, `limit` at once: a burst waits here, not in the pool, whose connect timeout would mean an outage.
function readers(limit: number) {
  const inFlight = new Map<string, Promise<unknown>>()
  const waiting: (() => void)[] = []
  let running = 0
  return {
    once<T>(key: string, work: () => Promise<T>): Promise<T> {
      const shared = inFlight.get(key) ?? work().finally(() => inFlight.delete(key))
      inFlight.set(key, shared)
      return shared as Promise<T>
    },
    async turn<T>(work: () => Promise<T>): Promise<T> {
      if (running < limit) running++
      else await new Promise<void>((resolve) => waiting.push(resolve))
      try {
        return await work()
      } finally {
        const next = waiting.shift()
        if (next) next()
        else running--
      }
    },
  }
}

type Next = (error?: unknown) => void
type Route = 'asset' | 'page' | 'session' | 'leases' | 'runs' | 'action'

async function serve(site: Site, req: IncomingMessage, res: ServerResponse, next?: Next) {
  const { db, guard, table, basePath } = site
  const url = new URL(req.url ?? '/', 'http://localhost')
  // As the browser addressed it: Express's mount strips its prefix from req.url, not from this.
  const outer = new URL((req as { originalUrl?: string }).originalUrl ?? req.url ?? '/', url).pathname
  const under = (p: string) => basePath === '' || p === basePath || p.startsWith(`${basePath}/`)
  if (!under(outer)) return pass(res, next)
  let path = url.pathname
  if (basePath !== '' && under(path)) path = path.slice(basePath.length) || '/'
  const method = req.method === 'HEAD' ? 'GET' : req.method
  const job = /^\/api\/jobs\/([^/]+)\/(runs|pause|resume|release)$/.exec(path)
  const route = routeOf(path, method, job)
  if (route === undefined) return pass(res, next)
  secure(res)
  if (guard === undefined && !site.hosts.has(hostName(req.headers.host))) {
    const [names, host] = [[...site.hosts].join(', '), JSON.stringify(req.headers.host ?? '')]
    const why = `Without a token this dashboard answers only for ${names}, not Host ${host}`
    return send(res, 421, TEXT_TYPE, `${why}: add the name with --allowed-host (allowedHosts), or set a token.\n`)
  }
  // The page's URLs are relative, so the page itself must end in '/': '/cron' would load '/app.js'.
  if (route === 'page' && !outer.endsWith('/')) {
    res.setHeader('Location', `${outer.slice(outer.lastIndexOf('/') + 1)}/${url.search}`)
    return send(res, 308, TEXT_TYPE, 'The dashboard is one level down: add a trailing slash.\n')
  }
  // Served before the token check: no data, and the login page needs its style.
  if (route === 'asset') {
    res.setHeader('Cache-Control', 'no-cache')
    const { type, body } = asset(path.slice(1))!
    return send(res, 200, type, body)
  }
  if (route === 'session') return session(site, req, res, path)

  // Refused before anything else, so a read-only dashboard never acts whoever asks.
  if (route === 'action' && method === 'POST' && !site.actions)
    return fail(res, 403, 'actions are off: start the dashboard with allowActions (--allow-actions) and a token')
  const admitted = guard === undefined ? true : guard.admit(req)
  if (typeof admitted === 'number') return tooMany(res, admitted)
  if (!admitted) {
    if (route === 'page' && method === 'GET') return send(res, 401, HTML_TYPE, loginPage(table))
    res.setHeader('WWW-Authenticate', 'Bearer realm="pg-cron-lease dashboard"')
    return fail(res, 401, 'this dashboard needs its token: send Authorization: Bearer <token>, or sign in at its page')
  }
  const query = url.searchParams
  const name = job !== null ? attempt(() => decodeURIComponent(job[1]!)) : route === 'runs' ? query.get('job') : ''
  if (name === null) return fail(res, 400, 'api/runs needs the job: api/runs?job=<name>')
  if (name === undefined) return fail(res, 400, 'the job name in the path is not valid percent-encoded UTF-8')
  const allowed = route === 'action' ? 'POST' : 'GET'
  if (method !== allowed) {
    res.setHeader('Allow', allowed)
    return fail(res, 405, `${method} is not served here`)
  }
  if (route === 'page') return send(res, 200, HTML_TYPE, shell(table, site.actions, guard !== undefined))
  if (route === 'action') {
    const problem = originProblem(req, site, true)
    if (problem !== undefined) return fail(res, 403, `the Origin of this request is not the dashboard: ${problem}`)
    const action = job![2] as keyof typeof ACTIONS
    const until = query.get('until') ?? undefined
    const options = action === 'pause' ? { table, forMs: numeric(query.get('forMs')), until } : { table }
    return reply(res, path, async () => {
      const changed = await ACTIONS[action](db, name, options)
      return json({ jobName: name, action, changed }, changed ? 200 : 404)
    })
  }
  const key = route === 'runs' ? `runs ${JSON.stringify([name, query.get('limit'), query.get('before')])}` : path
  await reply(res, path, () => site.once(key, () => read(site, route, path, name, query)))
}

function routeOf(path: string, method: string | undefined, job: RegExpExecArray | null): Route | undefined {
  if (method === 'GET' && asset(path.slice(1)) !== undefined) return 'asset'
  if (method === 'POST' && (path === '/login' || path === '/logout')) return 'session'
  if (path === '/') return 'page'
  if (['/api/jobs', '/metrics', '/healthz'].includes(path)) return 'leases'
  if (path === '/api/runs' || job?.[2] === 'runs') return 'runs'
  return job === null ? undefined : 'action'
}

function pass(res: ServerResponse, next: Next | undefined) {
  if (next) return next()
  secure(res)
  send(res, 404, TEXT_TYPE, 'Not found\n')
}

// Without its port: `[::1]:8080` is `[::1]`.
function hostName(host: string | undefined): string {
  const text = (host ?? '').toLowerCase()
  return text.startsWith('[') ? text.slice(0, text.indexOf(']') + 1) : text.replace(/:\d*$/, '')
}

async function session(site: Site, req: IncomingMessage, res: ServerResponse, path: string) {
  const { guard, table } = site
  if (guard === undefined) return seeOther(res)
  const problem = originProblem(req, site, false)
  if (problem !== undefined) return send(res, 403, HTML_TYPE, loginPage(table, `Not signed in: ${problem}.`))
  if (path === '/logout') {
    guard.signOut(req, res)
    return seeOther(res)
  }
  const wait = guard.lockedFor(req)
  if (wait > 0) return tooMany(res, wait, (said) => loginPage(table, said))
  const given = new URLSearchParams(await readBody(req)).get('token') ?? ''
  if (!guard.matches(req, given))
    return send(res, 401, HTML_TYPE, loginPage(table, 'That token is not the one this dashboard was started with.'))
  guard.signIn(req, res)
  seeOther(res)
}

function tooMany(res: ServerResponse, seconds: number, page?: (said: string) => string) {
  const said = `too many wrong tokens from this address: try again in ${seconds} s`
  res.setHeader('Retry-After', String(seconds))
  if (page === undefined) fail(res, 429, said)
  else send(res, 429, HTML_TYPE, page(said))
}

type Reply = { status: number; type: string; body: string }

async function read(site: Site, route: Route, path: string, name: string, query: URLSearchParams): Promise<Reply> {
  const { db, table, once, turn } = site
  if (route === 'runs') {
    const [limit, before] = [numeric(query.get('limit')), query.get('before') ?? undefined]
    return json(await turn(() => listRuns(db, { table, jobName: name, limit, before })))
  }
  // One read of the leases serves the jobs, /metrics and /healthz asked at once.
  const leases = () => once('leases', () => turn(() => readLeases(db, { table })))
  if (path === '/api/jobs') return json((await leases()).leases)
  if (path === '/metrics') return { status: 200, type: METRICS_TYPE, body: renderPrometheus((await leases()).leases) }
  const verdict = await checkJobs(db, { table }, leases)
  return json(verdict, verdict.healthy ? 200 : 503)
}

const json = (value: unknown, status = 200): Reply => ({ status, type: JSON_TYPE, body: jsonText(value) })

// A malformed number goes on as text, for the library's own argument error (a 400) to name.
const numeric = (text: string | null) =>
  text === null ? undefined : ((/^\d+$/.test(text) ? Number(text) : text) as number)

// Any other error (a SQLSTATE, a socket's code) is a 503, which the page shows as stale data.
const STATUS_OF = { [ERROR_CODES.INVALID_ARGUMENT]: 400, [ERROR_CODES.NO_HISTORY]: 404, [ERROR_CODES.ROW_LOCKED]: 409 }

async function reply(res: ServerResponse, path: string, work: () => Promise<Reply>) {
  const answer = await work().catch((error: unknown): Reply => {
    const message = messageOf(error)
    const status = (STATUS_OF as Record<string, number>)[(error as { code?: string } | null)?.code ?? ''] ?? 503
    if (path === '/metrics') return { status, type: TEXT_TYPE, body: `# ${message}\n` }
    return json(path === '/healthz' ? { healthy: false, error: message } : { error: message }, status)
  })
  send(res, answer.status, answer.type, answer.body)
}

// Why a POST is not from the dashboard's own page. A page elsewhere cannot set X-Forwarded-* without a preflight.
function originProblem(req: IncomingMessage, { guard }: Site, strict: boolean): string | undefined {
  if (req.headers['sec-fetch-site'] === 'cross-site') return 'it came from another site'
  const origin = req.headers.origin
  if (origin === undefined) return !strict || guard!.bearer(req) ? undefined : 'it has no Origin and no bearer header'
  const host = [req.headers['x-forwarded-host']].flat()[0]?.split(',')[0]?.trim() || req.headers.host
  const own = originOf(`${forwardedProto(req)}://${host}`)
  if (own !== undefined && originOf(origin) === own) return undefined
  return (
    `the browser is at ${origin}, but the dashboard sees itself at ${own ?? `Host ${JSON.stringify(host ?? '')}`}; ` +
    'a proxy in front must pass X-Forwarded-Host and X-Forwarded-Proto (docs/dashboard.md, Behind a reverse proxy)'
  )
}

function originOf(text: string): string | undefined {
  const origin = attempt(() => new URL(text).origin)
  return origin === 'null' ? undefined : origin
}

function attempt<T>(work: () => T): T | undefined {
  try {
    return work()
  } catch {
    return undefined
  }
}

function seeOther(res: ServerResponse) {
  res.setHeader('Location', './')
  send(res, 303, TEXT_TYPE, 'See ./\n')
}

const fail = (res: ServerResponse, status: number, error: string) => send(res, status, JSON_TYPE, jsonText({ error }))

async function readBody(req: IncomingMessage): Promise<string> {
  let body = ''
  for await (const chunk of req.setEncoding('utf8')) {
    body += chunk
    if (body.length > 4096) throw new Error('request body too large')
  }
  return body
}
