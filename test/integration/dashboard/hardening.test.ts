/**
 * The dashboard tried as an attacker and under load, against a real Postgres over real HTTP:
 * sessions and wrong-token limits, the Host check that stops DNS rebinding, shared reads under a
 * burst, statuses chosen from what an error is, jobs named '.' and '..', a reverse proxy set up as
 * docs/dashboard.md says, and a mounted handler that leaves other paths alone.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import express from 'express'
import pg from 'pg'
import { freePort, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { createDashboard, type DashboardOptions } from '../../../src/dashboard/index.ts'
import { listLeases, listRuns, quoteTable, withCronLease } from '../../../src/index.ts'
import { historyTableOf } from '../../../src/sql.ts'

const TOKEN = 'correct horse battery staple'
let pool: pg.Pool
let table: string
const closers: (() => unknown)[] = []

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'dash_hard')
  for (const name of ['report:hourly', '.', '..']) {
    await withCronLease(pool, name, 60_000, () => {}, { table, holder: 'web-1' })
  }
})
after(async () => {
  for (const close of closers.reverse()) await close()
  await pool?.end()
})

async function listen(listener: http.RequestListener): Promise<string> {
  const server = http.createServer(listener)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  closers.push(() => {
    server.closeAllConnections()
    server.close()
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const serve = (opts: Partial<DashboardOptions> = {}) => {
  const handler = createDashboard({ db: pool, table, ...opts })
  return listen((req, res) => handler(req, res))
}

interface Answer {
  status: number
  headers: http.IncomingHttpHeaders
  body: string
}

/** A request with headers fetch will not send (Host) or from another loopback address. */
function request(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string; localAddress?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const sent = http.request(
      url,
      { method: options.method ?? 'GET', headers: options.headers, localAddress: options.localAddress },
      (reply) => {
        let body = ''
        reply.setEncoding('utf8')
        reply.on('data', (chunk: string) => (body += chunk))
        reply.on('end', () => resolve({ status: reply.statusCode ?? 0, headers: reply.headers, body }))
      },
    )
    sent.on('error', reject)
    sent.end(options.body)
  })
}

const login = (base: string, token: string, localAddress?: string) =>
  request(`${base}/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: base },
    body: new URLSearchParams({ token }).toString(),
    ...(localAddress !== undefined && { localAddress }),
  })
const cookieOf = (answer: Answer) => String(answer.headers['set-cookie']?.[0] ?? '').split(';')[0]!
const jobsWith = async (base: string, cookie: string) =>
  (await request(`${base}/api/jobs`, { headers: { cookie } })).status

describe('each login is a session of its own, held on the server', () => {
  test('two logins get two cookies; sign-out revokes one on the server; a restarted dashboard knows neither', async () => {
    const base = await serve({ token: TOKEN })
    const first = cookieOf(await login(base, TOKEN))
    const second = cookieOf(await login(base, TOKEN))
    assert.notEqual(first, second)
    assert.match(first, /^pg_cron_lease_dashboard=[\w-]{43}$/)
    assert.equal(await jobsWith(base, first), 200)
    const out = await request(`${base}/logout`, { method: 'POST', headers: { cookie: first, origin: base } })
    assert.equal(out.status, 303)
    assert.equal(await jobsWith(base, first), 401, 'the same cookie, replayed after sign-out')
    assert.equal(await jobsWith(base, second), 200, 'the other session stays')
    const restarted = await serve({ token: TOKEN })
    assert.equal(await jobsWith(restarted, second), 401, 'a session does not outlive its process')
  })

  test('five wrong tokens in a minute from one address: 429 with Retry-After, even for the right one; other addresses and sessions go on', async () => {
    const base = await serve({ token: TOKEN })
    const session = cookieOf(await login(base, TOKEN))
    for (let i = 0; i < 3; i++) assert.equal((await login(base, `wrong guess ${i}`)).status, 401)
    for (let i = 0; i < 2; i++) {
      const bearer = await request(`${base}/api/jobs`, { headers: { authorization: `Bearer wrong ${i}` } })
      assert.equal(bearer.status, 401, 'a wrong bearer token counts too')
    }
    for (const attempt of [
      () => login(base, TOKEN),
      () => request(`${base}/api/jobs`, { headers: { authorization: `Bearer ${TOKEN}` } }),
    ]) {
      const refused = await attempt()
      assert.equal(refused.status, 429)
      const wait = Number(refused.headers['retry-after'])
      assert.ok(wait > 0 && wait <= 60, `Retry-After ${refused.headers['retry-after']}`)
      assert.match(refused.body, /too many wrong tokens from this address: try again in \d+ s/)
      assert.equal(refused.headers['set-cookie'], undefined)
    }
    assert.equal(await jobsWith(base, session), 200, 'a session is not locked out by guesses from its address')
    const elsewhere = await login(base, TOKEN, '127.0.0.2')
    assert.equal(elsewhere.status, 303, 'another address signs in')
  })

  test('createDashboard refuses a token under 16 characters, saying its length and never the token', () => {
    assert.throws(
      () => createDashboard({ db: pool, token: 'hunter2-short' }),
      (error: Error) =>
        error instanceof TypeError &&
        /opts\.token must be at least 16 characters, got one of 13/.test(error.message) &&
        !error.message.includes('hunter2'),
    )
    assert.doesNotThrow(() => createDashboard({ db: pool, token: 'x'.repeat(16) }))
  })
})

describe('without a token, only loopback names and allowedHosts are answered (DNS rebinding)', () => {
  test('another Host gets 421 with a one-line reason; localhost, 127.0.0.1 and [::1] with any port are answered', async () => {
    const base = await serve()
    for (const host of ['localhost', 'localhost:8080', '127.0.0.1:1234', '[::1]:8080', 'LOCALHOST']) {
      assert.equal((await request(`${base}/api/jobs`, { headers: { host } })).status, 200, host)
    }
    for (const path of ['/', '/api/jobs', '/app.js', '/healthz']) {
      const refused = await request(`${base}${path}`, { headers: { host: 'rebind.test:8080' } })
      assert.equal(refused.status, 421, path)
      assert.match(
        refused.body,
        /^Without a token this dashboard answers only for .*"rebind\.test:8080".*--allowed-host \(allowedHosts\), or set a token\.\n$/,
      )
      assert.doesNotMatch(refused.body, /report:hourly/)
    }
  })

  test('allowedHosts adds names, matched without port or case; a token lifts the check', async () => {
    const base = await serve({ allowedHosts: ['cron.example.com'] })
    assert.equal((await request(`${base}/api/jobs`, { headers: { host: 'Cron.Example.com:8443' } })).status, 200)
    assert.equal((await request(`${base}/api/jobs`, { headers: { host: 'cron.example.com.evil' } })).status, 421)
    const guarded = await serve({ token: TOKEN })
    const headers = { host: 'dashboard.internal', authorization: `Bearer ${TOKEN}` }
    assert.equal((await request(`${guarded}/api/jobs`, { headers })).status, 200)
    assert.throws(
      () => createDashboard({ db: pool, allowedHosts: ['cron.example.com:80'] }),
      /opts\.allowedHosts must be a host name/,
    )
    assert.throws(
      () => createDashboard({ db: pool, allowedHosts: 'cron.example.com' as never }),
      /opts\.allowedHosts must be an array/,
    )
  })
})

describe('a burst of requests shares its reads, and waits for a busy pool without calling it an outage', () => {
  test('200 requests at once over 10,000 jobs and many job pages all answer 200, with a few dozen reads', async (t) => {
    const many = await freshTable(pool, 'dash_burst')
    await pool.query(
      `INSERT INTO ${quoteTable(many)} (job_name, lease_until, holder, claimed_at, last_outcome, last_finished_at, last_duration_ms, every_ms)
       SELECT 'job:' || lpad(i::text, 5, '0'), clock_timestamp() + interval '1 minute', 'web-' || (i % 7), clock_timestamp(),
              'ok', clock_timestamp(), i % 1000, 60000
       FROM generate_series(1, 10000) AS i`,
    )
    // A pool like the command's: four connections, and a short connectionTimeoutMillis, which also
    // bounds the wait for a free client.
    const small = new pg.Pool({ connectionString: await testDatabaseUrl(), max: 4, connectionTimeoutMillis: 1000 })
    closers.push(() => small.end())
    let reads = 0
    // The reads wait until every request has reached the dashboard, so what is shared does not
    // depend on how fast this machine sends them: all 200 are in flight at once.
    let arrived = 0
    let allIn!: () => void
    const gate = new Promise<void>((resolve) => (allIn = resolve))
    const counted = {
      async query(text: string, params?: unknown[]) {
        reads++
        await gate
        return small.query(text, params)
      },
    }
    const handler = createDashboard({ db: counted, table: many })
    const base = await listen((req, res) => {
      if (++arrived === 200) allIn()
      handler(req, res)
    })
    const jobs = Array.from({ length: 10 }, (_, i) => encodeURIComponent(`job:${String(i + 1).padStart(5, '0')}`))
    const paths = Array.from({ length: 200 }, (_, i) =>
      i % 2 === 0
        ? ['/api/jobs', '/metrics', '/healthz'][i % 3]!
        : i % 4 === 1
          ? `/api/runs?job=${jobs[i % 10]}&limit=60`
          : `/api/jobs/${jobs[i % 10]}/runs?limit=60`,
    )
    const replies = await Promise.all(
      paths.map(async (p) => {
        const reply = await fetch(`${base}${p}`)
        return `${reply.status} ${p} ${reply.status === 200 ? '' : await reply.text()}`.trim()
      }),
    )
    assert.deepEqual(
      replies.filter((r) => !r.startsWith('200 ')),
      [],
    )
    t.diagnostic(`${reads} reads for 200 requests`)
    // Without sharing: 200 reads at least. Shared: the table's facts and the leases once, each job's runs once.
    assert.ok(reads <= 15, `${reads} reads for 200 requests`)
  })
})

describe('statuses come from what the error is', () => {
  test('a locked row answers 409 naming the holder; a database that cannot be reached answers an action 503', async () => {
    const base = await serve({ token: TOKEN, allowActions: true })
    const holder = await pool.connect()
    try {
      await holder.query(`SET application_name = 'row-holder'`)
      await holder.query('BEGIN')
      await holder.query(`SELECT 1 FROM ${quoteTable(table)} WHERE job_name = 'report:hourly' FOR UPDATE`)
      const locked = await request(`${base}/api/jobs/report%3Ahourly/pause`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}` },
      })
      assert.equal(locked.status, 409)
      assert.match(JSON.parse(locked.body).error, /stayed locked .* by pid \d+ \(application_name "row-holder"\)/)
    } finally {
      await holder.query('ROLLBACK')
      holder.release()
    }
    const dead = new pg.Pool({ connectionString: `postgres://nobody@127.0.0.1:${await freePort()}/none` })
    dead.on('error', () => {})
    closers.push(() => dead.end())
    const down = await serve({ db: dead, token: TOKEN, allowActions: true })
    const refused = await request(`${down}/api/jobs/report%3Ahourly/pause`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
    })
    assert.equal(refused.status, 503)
    assert.match(JSON.parse(refused.body).error, /ECONNREFUSED|connect/)
  })

  test('a table without run history answers 404 with what to run; a bad argument 400', async () => {
    const bare = await freshTable(pool, 'dash_bare')
    await withCronLease(pool, 'solo', 60_000, () => {}, { table: bare })
    await pool.query(`DROP TABLE ${quoteTable(historyTableOf(bare))}`)
    const base = await serve({ table: bare })
    const missing = await request(`${base}/api/runs?job=solo`)
    assert.equal(missing.status, 404)
    assert.match(JSON.parse(missing.body).error, /has no run history.*migrate/)
    assert.equal((await request(`${base}/api/runs?job=solo&limit=zero`)).status, 400)
  })
})

describe("every job's runs can be read, whatever its name", () => {
  test("api/runs?job= serves '.', '..' and the rest; api/jobs/:name/runs still works; no job is a 400", async () => {
    const base = await serve()
    for (const name of ['.', '..', 'report:hourly']) {
      const reply = await fetch(`${base}/api/runs?job=${encodeURIComponent(name)}&limit=5`)
      assert.equal(reply.status, 200, name)
      const expected = await listRuns(pool, { table, jobName: name, limit: 5 })
      assert.ok(expected.length >= 1)
      assert.deepEqual(await reply.json(), JSON.parse(JSON.stringify(expected)), name)
    }
    assert.equal((await fetch(`${base}/api/jobs/report%3Ahourly/runs`)).status, 200)
    const none = await fetch(`${base}/api/runs`)
    assert.equal(none.status, 400)
    assert.match(((await none.json()) as { error: string }).error, /api\/runs\?job=<name>/)
  })
})

describe('behind a reverse proxy set up as docs/dashboard.md says', () => {
  // The proxy_set_header lines of the docs' nginx example, applied by a small proxy that, like
  // nginx by default, sends the upstream's own address as Host.
  const documented = [
    ...readFileSync(new URL('../../../docs/dashboard.md', import.meta.url), 'utf8').matchAll(
      /^\s*proxy_set_header\s+(\S+)\s+(\$\w+);/gm,
    ),
  ].map((m) => [m[1]!, m[2]!] as const)

  async function proxy(dashboard: string, lines: readonly (readonly [string, string])[]) {
    const target = new URL(dashboard)
    return listen((req, res) => {
      const given = req.headers.host ?? ''
      const variables: Record<string, string> = {
        $http_host: given,
        $host: given.replace(/:\d+$/, ''),
        $scheme: 'http',
      }
      const headers: http.OutgoingHttpHeaders = { ...req.headers, host: target.host }
      for (const [name, variable] of lines) headers[name.toLowerCase()] = variables[variable] ?? ''
      const forwarded = http.request(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url!.replace(/^\/cron/, ''),
          headers,
        },
        (reply) => {
          res.writeHead(reply.statusCode ?? 502, reply.headers)
          reply.pipe(res)
        },
      )
      req.pipe(forwarded)
    })
  }

  test('the docs pass the forwarded host and scheme', () => {
    assert.deepEqual(
      documented.map(([name]) => name),
      ['X-Forwarded-Host', 'X-Forwarded-Proto'],
    )
  })

  test('login and actions work through it, as written', async () => {
    const front = await proxy(await serve({ token: TOKEN, allowActions: true }), documented)
    const signedIn = await login(`${front}/cron`, TOKEN)
    assert.equal(signedIn.status, 303, signedIn.body)
    const cookie = cookieOf(signedIn)
    assert.equal(await jobsWith(`${front}/cron`, cookie), 200)
    const paused = await request(`${front}/cron/api/jobs/report%3Ahourly/pause`, {
      method: 'POST',
      headers: { cookie, origin: front },
    })
    assert.equal(paused.status, 200, paused.body)
    const resumed = await request(`${front}/cron/api/jobs/report%3Ahourly/resume`, {
      method: 'POST',
      headers: { cookie, origin: front },
    })
    assert.equal(resumed.status, 200)
    assert.equal((await listLeases(pool, { table })).find((l) => l.jobName === 'report:hourly')?.paused, false)
  })

  test('without those lines, login says why on the page instead of looping back to the form', async () => {
    const front = await proxy(await serve({ token: TOKEN }), [])
    const refused = await request(`${front}/cron/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: front },
      body: `token=${encodeURIComponent(TOKEN)}`,
    })
    assert.equal(refused.status, 403)
    assert.match(refused.body, /<form method="post" action="login">/)
    assert.match(
      refused.body,
      /role="alert">Not signed in: the browser is at http:\/\/127\.0\.0\.1:\d+, but the dashboard sees itself at http:\/\/127\.0\.0\.1:\d+; a proxy in front must pass X-Forwarded-Host and X-Forwarded-Proto/,
    )
    assert.equal(refused.headers['set-cookie'], undefined)
  })
})

describe('a mounted dashboard leaves what it does not serve untouched', () => {
  const ours = ['content-security-policy', 'x-frame-options', 'cache-control', 'x-content-type-options']

  test("under app.use('/cron', …), a sibling route /cron/export keeps its own headers", async () => {
    const app = express()
    app.use('/cron', createDashboard({ db: pool, table }))
    app.get('/cron/export', (_req, res) => void res.type('text/csv').send('a,b\n'))
    const base = await listen(app)
    const reply = await fetch(`${base}/cron/export`)
    assert.equal(reply.status, 200)
    assert.equal(await reply.text(), 'a,b\n')
    for (const header of ours) assert.equal(reply.headers.get(header), null, header)
    assert.match(
      (await fetch(`${base}/cron/api/jobs`)).headers.get('content-security-policy') ?? '',
      /default-src 'none'/,
    )
  })

  test("with a basePath, the app's own /, /healthz and /metrics are the app's", async () => {
    const app = express()
    app.use(createDashboard({ db: pool, table, basePath: '/cron' }))
    for (const path of ['/', '/healthz', '/metrics']) app.get(path, (_req, res) => void res.send(`app ${path}`))
    const base = await listen(app)
    for (const path of ['/', '/healthz', '/metrics']) {
      const reply = await fetch(`${base}${path}`)
      assert.equal(await reply.text(), `app ${path}`, path)
      for (const header of ours) assert.equal(reply.headers.get(header), null, `${path} ${header}`)
    }
    assert.equal((await fetch(`${base}/cron/healthz`)).status, 200)
    assert.equal((await fetch(`${base}/cron`, { redirect: 'manual' })).status, 308)
  })
})
