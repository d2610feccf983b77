/**
 * The dashboard's server against a real Postgres, over real HTTP, without a browser: the token, the
 * read-only default, the actions and their Origin check, the headers, the base path, the machine
 * endpoints, and the `dashboard` command. What the page shows is tested in a browser, in
 * test/browser/dashboard.test.ts.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { chmodSync, copyFileSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import express from 'express'
import type pg from 'pg'
import { build, type UserConfig } from 'tsdown'
import { freePort, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { openPool } from '../../../src/cli/connect.ts'
import { main } from '../../../src/cli/main.ts'
import { createDashboard, type DashboardOptions } from '../../../src/dashboard/index.ts'
import { listLeases, listRuns, quoteTable, withCronLease } from '../../../src/index.ts'
import { renderPrometheus } from '../../../src/prometheus.ts'
import { finished } from '../../helpers/child.ts'
import { parseExposition } from '../../helpers/prometheus.ts'

const ROOT = fileURLToPath(new URL('../../..', import.meta.url))
const TOKEN = 'correct horse battery staple'
let pool: pg.Pool
let table: string
const servers: http.Server[] = []

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'dash')
  await withCronLease(pool, 'report:hourly', 60_000, () => {}, { table, holder: 'web-1' })
  await withCronLease(pool, 'billing:daily', 60_000, () => {}, { table, holder: 'web-2' })
})
after(async () => {
  for (const server of servers) server.close()
  await pool?.end()
})

/** Serves a dashboard on a free loopback port; resolves its base URL. */
async function serve(opts: Partial<DashboardOptions> = {}, wrap?: http.RequestListener): Promise<string> {
  const handler = createDashboard({ db: pool, table, ...opts })
  const server = http.createServer(wrap ?? ((req, res) => handler(req, res)))
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** The status of a GET with the given Host header, which fetch would not let us choose. */
function requestStatus(url: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers: { host } }, (reply) => {
        reply.resume()
        resolve(reply.statusCode ?? 0)
      })
      .on('error', reject)
  })
}

const paused = async (jobName: string) => (await listLeases(pool, { table })).find((l) => l.jobName === jobName)?.paused

describe('read-only by default', () => {
  test('without a token the jobs are served, with the field names of listLeases', async () => {
    const base = await serve()
    const reply = await fetch(`${base}/api/jobs`)
    assert.equal(reply.status, 200)
    const jobs = (await reply.json()) as Record<string, unknown>[]
    assert.deepEqual(
      jobs.map((j) => j.jobName),
      ['billing:daily', 'report:hourly'],
    )
    const expected = Object.keys((await listLeases(pool, { table }))[0]!).sort()
    assert.deepEqual(Object.keys(jobs[0]!).sort(), expected)
  })

  test('a POST to an action gets 403 and changes nothing, with or without a token', async () => {
    for (const opts of [{}, { token: TOKEN }, { allowActions: true }]) {
      const base = await serve(opts)
      const reply = await fetch(`${base}/api/jobs/report%3Ahourly/pause`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}` },
      })
      assert.equal(reply.status, 403, JSON.stringify(opts))
      assert.match(((await reply.json()) as { error: string }).error, /actions are off/)
      assert.equal(await paused('report:hourly'), false)
    }
  })

  test('the page carries no action buttons flag, and every reply the security headers', async () => {
    const base = await serve()
    for (const file of ['/', '/api/jobs', '/app.js', '/metrics', '/healthz', '/nowhere']) {
      const reply = await fetch(`${base}${file}`)
      const csp = reply.headers.get('content-security-policy') ?? ''
      assert.match(csp, /script-src 'self'/, file)
      assert.match(csp, /style-src 'self'/, file)
      assert.match(csp, /default-src 'none'/, file)
      assert.match(csp, /frame-ancestors 'none'/, file)
      assert.doesNotMatch(csp, /unsafe-inline|https?:|\*/, file)
      assert.equal(reply.headers.get('x-content-type-options'), 'nosniff', file)
    }
    const page = await (await fetch(`${base}/`)).text()
    assert.match(page, /data-actions="false"/)
    // No inline script and no other origin: only the two relative assets.
    assert.deepEqual(
      [...page.matchAll(/<script[^>]*>/g)].map((m) => m[0]),
      ['<script src="app.js" defer>'],
    )
    assert.doesNotMatch(page, /https?:\/\//)
  })
})

describe('the page script never parses data as HTML', () => {
  test('app.js builds the DOM with createElement and textContent only', async () => {
    const source = await (await fetch(`${await serve()}/app.js`)).text()
    assert.match(source, /createElement/)
    for (const sink of ['innerHTML', 'outerHTML', 'insertAdjacentHTML', 'document.write', 'eval(', 'new Function']) {
      assert.ok(!source.includes(sink), `app.js uses ${sink}`)
    }
  })
})

describe('with a token, every page and endpoint needs it', () => {
  test('without it: 401 and no data, on the page and on every endpoint', async () => {
    for (const file of [
      '/',
      '/api/jobs',
      '/api/jobs/report%3Ahourly/runs',
      '/api/runs?job=x',
      '/metrics',
      '/healthz',
    ]) {
      // A dashboard each: five wrong tokens from one address would lock it out (429).
      const base = await serve({ token: TOKEN })
      for (const authorization of [undefined, 'Bearer wrong', `Bearer ${TOKEN}x`, TOKEN]) {
        const reply = await fetch(`${base}${file}`, { headers: authorization ? { authorization } : {} })
        assert.equal(reply.status, 401, `${file} with ${authorization}`)
        assert.doesNotMatch(await reply.text(), /report:hourly|billing/, file)
      }
    }
    const login = await (await fetch(`${await serve({ token: TOKEN })}/`)).text()
    assert.match(login, /<form method="post" action="login">/)
  })

  test('with the bearer header the page and the data load', async () => {
    const base = await serve({ token: TOKEN })
    const headers = { authorization: `Bearer ${TOKEN}` }
    assert.equal((await fetch(`${base}/`, { headers })).status, 200)
    const jobs = (await (await fetch(`${base}/api/jobs`, { headers })).json()) as unknown[]
    assert.equal(jobs.length, 2)
  })

  test('the login form sets an HttpOnly, SameSite=Strict cookie that admits; a wrong token is refused', async () => {
    const base = await serve({ token: TOKEN })
    const post = (token: string) =>
      fetch(`${base}/login`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: base },
        body: new URLSearchParams({ token }),
      })
    const wrong = await post('guess')
    assert.equal(wrong.status, 401)
    assert.equal(wrong.headers.get('set-cookie'), null)
    const right = await post(TOKEN)
    assert.equal(right.status, 303)
    const cookie = right.headers.get('set-cookie') ?? ''
    assert.match(cookie, /HttpOnly/)
    assert.match(cookie, /SameSite=Strict/)
    assert.ok(!cookie.includes(TOKEN), 'the cookie does not hold the token itself')
    const pair = cookie.split(';')[0]!
    assert.equal((await fetch(`${base}/api/jobs`, { headers: { cookie: pair } })).status, 200)
    assert.equal((await fetch(`${base}/api/jobs`, { headers: { cookie: `${pair}x` } })).status, 401)
  })
})

describe('actions, with allowActions and a token', () => {
  test('pause, resume and release change the row; a foreign Origin gets 403 and changes nothing', async () => {
    const base = await serve({ token: TOKEN, allowActions: true })
    const page = await (await fetch(`${base}/`, { headers: { authorization: `Bearer ${TOKEN}` } })).text()
    assert.match(page, /data-actions="true"/)
    const act = (what: string, headers: Record<string, string>) =>
      fetch(`${base}/api/jobs/report%3Ahourly/${what}`, { method: 'POST', headers })
    assert.equal((await act('pause', {})).status, 401, 'no token')
    assert.equal((await act('pause', { authorization: `Bearer ${TOKEN}`, origin: 'https://evil.example' })).status, 403)
    assert.equal(await paused('report:hourly'), false)
    const pausedReply = await act('pause', { authorization: `Bearer ${TOKEN}` })
    assert.equal(pausedReply.status, 200)
    assert.deepEqual(await pausedReply.json(), { jobName: 'report:hourly', action: 'pause', changed: true })
    assert.equal(await paused('report:hourly'), true)
    assert.equal((await act('resume', { authorization: `Bearer ${TOKEN}`, origin: base })).status, 200)
    assert.equal(await paused('report:hourly'), false)
    assert.equal((await act('release', { authorization: `Bearer ${TOKEN}` })).status, 200)
    const lease = (await listLeases(pool, { table })).find((l) => l.jobName === 'report:hourly')
    assert.equal(lease?.held, false)
    assert.equal(
      (await fetch(`${base}/api/jobs/nobody/pause`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } }))
        .status,
      404,
    )
  })
})

describe('machine endpoints', () => {
  test('/metrics is the text of status --format prometheus, and parses', async () => {
    const base = await serve()
    const reply = await fetch(`${base}/metrics`)
    assert.equal(reply.status, 200)
    assert.match(reply.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/)
    const text = await reply.text()
    const families = parseExposition(text)
    const expected = parseExposition(renderPrometheus(await listLeases(pool, { table })))
    assert.deepEqual(Object.keys(families), Object.keys(expected))
    // Ages move between the two reads; the rest is the same.
    const stable = (t: string) =>
      t.replace(/_age_seconds\{([^}]*)\} \S+/g, '_age_seconds{$1}').replace(/next_due_in_seconds\{([^}]*)\} \S+/g, '')
    assert.equal(stable(text), stable(renderPrometheus(await listLeases(pool, { table }))))
  })

  test('/api/jobs/:name/runs is listRuns for the job, newest first, with its field names', async () => {
    const base = await serve()
    const reply = await fetch(`${base}/api/jobs/report%3Ahourly/runs?limit=5`)
    assert.equal(reply.status, 200)
    const runs = (await reply.json()) as Record<string, unknown>[]
    assert.deepEqual(
      runs,
      JSON.parse(JSON.stringify(await listRuns(pool, { table, jobName: 'report:hourly', limit: 5 }))),
    )
    assert.ok(runs.length >= 1)
    assert.deepEqual(Object.keys(runs[0]!).sort(), Object.keys((await listRuns(pool, { table, limit: 1 }))[0]!).sort())
    assert.equal((await fetch(`${base}/api/jobs/report%3Ahourly/runs?limit=zero`)).status, 400)
  })

  test('/healthz is 200 while check would pass and 503 once a job fails', async () => {
    const mine = await freshTable(pool, 'dash_health')
    const base = await serve({ table: mine })
    await withCronLease(pool, 'fine', 60_000, () => {}, { table: mine })
    assert.equal((await fetch(`${base}/healthz`)).status, 200)
    await withCronLease(
      pool,
      'broken',
      60_000,
      () => {
        throw new Error('disk full')
      },
      { table: mine },
    ).catch(() => {})
    const reply = await fetch(`${base}/healthz`)
    assert.equal(reply.status, 503)
    const verdict = (await reply.json()) as { healthy: boolean; jobs: { jobName: string; failing: boolean }[] }
    assert.equal(verdict.healthy, false)
    assert.deepEqual(
      verdict.jobs.filter((j) => j.failing).map((j) => j.jobName),
      ['broken'],
    )
  })

  test('a database that cannot be reached is a 503 with the reason, for the page to show as stale', async () => {
    const { default: pgModule } = await import('pg')
    const port = await freePort()
    const dead = new pgModule.Pool({
      connectionString: `postgres://nobody@127.0.0.1:${port}/none`,
      connectionTimeoutMillis: 2000,
    })
    dead.on('error', () => {})
    const base = await serve({ db: dead })
    for (const file of ['/api/jobs', '/healthz']) {
      const reply = await fetch(`${base}${file}`)
      assert.equal(reply.status, 503, file)
      assert.match(JSON.stringify(await reply.json()), /ECONNREFUSED|connect/)
    }
    await dead.end()
  })
})

describe('base path', () => {
  test('with basePath only the paths under it are served, and /cron redirects to /cron/', async () => {
    const base = await serve({ basePath: '/cron' })
    assert.equal((await fetch(`${base}/cron/api/jobs`)).status, 200)
    assert.equal((await fetch(`${base}/api/jobs`)).status, 404, 'a path outside the base path is not its own')
    const bare = await fetch(`${base}/cron`, { redirect: 'manual' })
    assert.equal(bare.status, 308)
    assert.equal(bare.headers.get('location'), 'cron/')
  })

  test("under Express's app.use('/cron', handler): the same, and an unknown path goes on to next()", async () => {
    const app = express()
    app.use('/cron', createDashboard({ db: pool, table }))
    app.use((_req, res) => void res.status(418).end())
    const base = await serve({}, app)
    assert.equal((await fetch(`${base}/cron/api/jobs`)).status, 200)
    const page = await fetch(`${base}/cron/`)
    assert.equal(page.status, 200)
    assert.match(await page.text(), /<script src="app\.js" defer>/)
    assert.equal((await fetch(`${base}/cron/app.js`)).status, 200)
    assert.equal((await fetch(`${base}/cron`, { redirect: 'manual' })).headers.get('location'), 'cron/')
    assert.equal((await fetch(`${base}/cron/elsewhere`)).status, 418, 'an unknown path goes to next()')
  })
})

describe('createDashboard refuses bad options before serving', () => {
  test('each names the option and the value', () => {
    assert.throws(() => createDashboard({} as DashboardOptions), /opts\.db must be/)
    assert.throws(() => createDashboard({ db: pool, basePath: 'cron' }), /opts\.basePath must be .*got "cron"/)
    assert.throws(() => createDashboard({ db: pool, token: '' }), /opts\.token must be a non-empty string/)
    assert.throws(() => createDashboard({ db: pool, allowActions: 'yes' as unknown as boolean }), /opts\.allowActions/)
    assert.throws(() => createDashboard({ db: pool, tokn: 'x' } as DashboardOptions), TypeError)
  })
})

describe('the dashboard command, as the package ships it', () => {
  // The bin built from tsdown.config.ts into a directory laid out like an installed package, so
  // what runs is dist/cli.mjs with the assets the build copies beside it.
  let installed: string
  before(async () => {
    const config = (await import('../../../tsdown.config.ts')).default as UserConfig[]
    const entry = config.find((c) => typeof c.entry === 'object' && 'cli' in (c.entry as object))!
    installed = mkdtempSync(path.join(os.tmpdir(), 'pgcl-dash-bin-'))
    await build({ ...entry, config: false, cwd: ROOT, outDir: path.join(installed, 'dist'), logLevel: 'error' })
    copyFileSync(path.join(ROOT, 'package.json'), path.join(installed, 'package.json'))
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(installed, 'node_modules'), 'dir')
  })
  after(() => rmSync(installed, { recursive: true, force: true }))
  const cli = (args: string[], env: Record<string, string> = {}) =>
    spawn(process.execPath, [path.join(installed, 'dist/cli.mjs'), 'dashboard', ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })

  /** The URL the command prints once it listens; rejects if it exits first. */
  const printedUrl = (child: ReturnType<typeof cli>) =>
    new Promise<string>((resolve, reject) => {
      let out = ''
      child.stdout.on('data', (chunk) => {
        out += chunk
        const found = /http:\/\/\S+/.exec(out)?.[0]
        if (found) resolve(found)
      })
      child.on('exit', () => reject(new Error(`exited before printing a URL: ${out}`)))
    })

  test('bad flags are usage errors (exit 2) before any connection', async () => {
    const cases: [string[], RegExp][] = [
      [['--port', '99999'], /--port must be a whole number from 0 to 65535, got "99999"/],
      [['--base-path', 'cron'], /--base-path must be a path that starts with '\/'/],
      [['--token-file', '/nonexistent/token'], /cannot read --token-file "\/nonexistent\/token"/],
      [['--token', 'secret'], /unknown option --token for dashboard/],
    ]
    for (const [args, message] of cases) {
      let err = ''
      const io = { stdout: { write: () => true }, stderr: { write: (t: string) => (err += t) }, env: {} }
      assert.equal(await main(['dashboard', '--url', 'postgres://u@127.0.0.1:1/x', ...args], io), 2, args.join(' '))
      assert.match(err, message)
    }
  })

  test('a token under 16 characters, or a token file others may read or write, is refused at start, saying why', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-dash-token-'))
    const file = (name: string, text: string, mode: number) => {
      const at = path.join(dir, name)
      writeFileSync(at, text)
      // Not through writeFileSync's mode, which the umask would narrow.
      chmodSync(at, mode)
      return at
    }
    const cases: [string[], Record<string, string>, RegExp][] = [
      [
        [],
        { PG_CRON_LEASE_DASHBOARD_TOKEN: 'abc' },
        /PG_CRON_LEASE_DASHBOARD_TOKEN must be at least 16 characters, got one of 3/,
      ],
      [['--token-file', file('short', 'abc\n', 0o600)], {}, /--token-file ".*short" must be at least 16 characters/],
      [
        ['--token-file', file('open', `${TOKEN}\n`, 0o644)],
        {},
        /may be read or written by others \(mode 0644\).*chmod 600/,
      ],
      [['--token-file', file('group', `${TOKEN}\n`, 0o620)], {}, /may be read or written by others \(mode 0620\)/],
      [['--allowed-host', 'cron.example.com:8080'], {}, /--allowed-host must be a host name .*without port/],
    ]
    for (const [args, env, message] of cases) {
      let err = ''
      const io = { stdout: { write: () => true }, stderr: { write: (t: string) => (err += t) }, env }
      assert.equal(await main(['dashboard', '--url', 'postgres://u@127.0.0.1:1/x', ...args], io), 2, args.join(' '))
      assert.match(err, message)
      assert.ok(!err.includes(TOKEN), 'the token is never printed')
    }
    rmSync(dir, { recursive: true, force: true })
  })

  test('two hundred requests at once on 10,000 jobs all answer, and only its Host names are answered', async () => {
    const many = await freshTable(pool, 'dash_load')
    // Healthy jobs, each claimed just now and due in a minute, so /healthz has every reason to say 200.
    await pool.query(
      `INSERT INTO ${quoteTable(many)} (job_name, lease_until, holder, claimed_at, last_outcome, last_finished_at, last_duration_ms, every_ms)
       SELECT 'job:' || lpad(i::text, 5, '0'), clock_timestamp() + interval '1 minute', 'web-' || (i % 7), clock_timestamp(),
              'ok', clock_timestamp(), i % 1000, 60000
       FROM generate_series(1, 10000) AS i`,
    )
    const port = await freePort()
    const child = cli(
      ['--url', await testDatabaseUrl(), '--table', many, '--port', String(port), '--allowed-host', 'cron.example.com'],
      { PG_CRON_LEASE_DASHBOARD_TOKEN: '' },
    )
    const done = finished(child, { killAfterMs: 120_000 })
    const base = new URL(await printedUrl(child)).origin
    const paths = Array.from({ length: 200 }, (_, i) =>
      i % 4 === 0 ? `/api/runs?job=job:${String(i).padStart(5, '0')}` : ['/api/jobs', '/metrics', '/healthz'][i % 3]!,
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
    const host = (name: string) => requestStatus(`${base}/api/jobs`, name)
    assert.equal(await host('cron.example.com'), 200, 'a name given with --allowed-host')
    assert.equal(await host(`localhost:${port}`), 200)
    assert.equal(await host('rebind.test'), 421)
    child.kill('SIGTERM')
    assert.equal((await done).code, 0)
  })

  test("the command's pool: a query waits for a busy pool without a deadline; a connection that cannot be made still times out", async () => {
    const url = await testDatabaseUrl()
    const busy = await openPool({ url, label: 'test' }, 300)
    const held = await Promise.all(Array.from({ length: 4 }, () => busy.connect()))
    const waiting = busy.query('SELECT 1 AS one')
    // Three times the connect timeout, with every client lent out: a wait, not a failure.
    await new Promise((resolve) => setTimeout(resolve, 900))
    held[0]!.release()
    assert.equal(((await waiting).rows[0] as { one: number }).one, 1)
    for (const client of held.slice(1)) client.release()
    await busy.end()

    const silent = net.createServer(() => {})
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const nowhere = await openPool(
      { url: `postgres://u@127.0.0.1:${(silent.address() as AddressInfo).port}/x`, label: 'silent' },
      300,
    )
    const started = performance.now()
    await assert.rejects(nowhere.query('SELECT 1'))
    assert.ok(performance.now() - started < 3000, `gave up after ${performance.now() - started} ms`)
    await nowhere.end()
    silent.close()
  })

  test('beyond loopback without a token it refuses to start, saying why', async () => {
    const env = { PG_CRON_LEASE_DASHBOARD_TOKEN: '' }
    const done = await finished(cli(['--host', '0.0.0.0', '--url', await testDatabaseUrl()], env), {
      killAfterMs: 30_000,
    })
    assert.equal(done.code, 2)
    assert.match(done.stderr, /refusing to listen on 0\.0\.0\.0 without a token/)
    assert.match(done.stderr, /PG_CRON_LEASE_DASHBOARD_TOKEN|--token-file/)
  })

  test('it prints the URL it listens on, takes the token from --token-file, and stops on SIGTERM', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-dash-'))
    const file = path.join(dir, 'token')
    writeFileSync(file, `${TOKEN}\n`, { mode: 0o600 })
    const port = await freePort()
    const child = cli([
      '--url',
      await testDatabaseUrl(),
      '--table',
      table,
      '--port',
      String(port),
      '--token-file',
      file,
      '--base-path',
      '/cron',
    ])
    const done = finished(child, { killAfterMs: 60_000 })
    const url = await printedUrl(child)
    assert.equal(url, `http://127.0.0.1:${port}/cron/`)
    assert.equal((await fetch(`${url}api/jobs`)).status, 401)
    assert.equal((await fetch(`${url}api/jobs`, { headers: { authorization: `Bearer ${TOKEN}` } })).status, 200)
    const script = await fetch(`${url}app.js`)
    assert.equal(script.status, 200, 'the page script ships beside the bin')
    assert.match(await script.text(), /textContent/)
    child.kill('SIGTERM')
    const { code, stdout, stderr } = await done
    assert.equal(code, 0, stderr)
    assert.ok(!`${stdout}${stderr}`.includes(TOKEN), 'the token is never printed')
    rmSync(dir, { recursive: true, force: true })
  })
})
