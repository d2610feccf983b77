/**
 * The dashboard in a real headless Chromium (dev/browser.ts), served by createDashboard
 * against a real Postgres whose rows the library wrote: what the pages show, that hostile names
 * stay inert, the token, read-only and actions, the base path behind two kinds of proxy, dark mode,
 * the stale banner and its recovery, and 10,000 jobs.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import pg from 'pg'
import type { Browser, Page } from 'playwright-core'
import { launchBrowser } from '../../dev/browser.ts'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../dev/postgres.ts'
import { createDashboard, type DashboardOptions } from '../../src/dashboard/index.ts'
import { listLeases, pauseJob, quoteTable, withCronLease } from '../../src/index.ts'
import { listRuns } from '../../src/listings.ts'
import { historyTableOf } from '../../src/sql.ts'
import { finished } from '../helpers/child.ts'

const TOKEN = 'browser-test-token'
const HOSTILE = '<img src=x onerror="window.__pwned=1">'
const BIDI = 'evil\u202Egnp.exe\u001b[31m'
let browser: Browser
let pool: pg.Pool
let table: string
const closers: (() => unknown)[] = []

before(async () => {
  browser = await launchBrowser()
  pool = await testPool()
  table = await freshTable(pool, 'dash_browser')
  await withCronLease(pool, 'report:hourly', 60_000, () => {}, { table, holder: 'web-1' })
  await withCronLease(
    pool,
    'billing:daily',
    60_000,
    () => {
      throw new Error('card declined')
    },
    { table, holder: 'web-2' },
  ).catch(() => {})
  await withCronLease(pool, 'cleanup', 60_000, () => {}, { table, holder: 'web-3' })
  await pauseJob(pool, 'cleanup', { table })
  await withCronLease(pool, HOSTILE, 60_000, () => {}, { table, holder: HOSTILE })
  await withCronLease(pool, BIDI, 60_000, () => {}, { table, holder: 'web\u202E1' })
  await nightlyHistory()
})

const NIGHTLY = 'nightly:report'
const MINUTE = 60_000

/**
 * Real runs of one job, one a minute by its occurrences: two ok, two occurrences missed, an error,
 * a run whose replica is killed mid-tick, an ok run, two more missed, and an ok run.
 */
async function nightlyHistory() {
  const base = Math.floor(Date.now() / MINUTE) * MINUTE - 10 * MINUTE
  const at = (k: number) => ({
    table,
    holder: 'web-4',
    occurrence: new Date(base + k * MINUTE),
    nextOccurrence: new Date(base + (k + 1) * MINUTE),
    everyMs: MINUTE,
  })
  for (const k of [0, 1, 4]) {
    await expireLease(pool, table, NIGHTLY)
    await withCronLease(
      pool,
      NIGHTLY,
      1000,
      () => {
        if (k === 4) throw new Error('report server down')
      },
      at(k),
    ).catch(() => {})
  }
  await expireLease(pool, table, NIGHTLY)
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', new URL('../helpers/dying-replica.ts', import.meta.url).pathname],
    {
      env: {
        ...process.env,
        DATABASE_URL: await testDatabaseUrl(),
        DYING_TABLE: table,
        DYING_JOB: NIGHTLY,
        DYING_OCCURRENCE: new Date(base + 5 * MINUTE).toISOString(),
        DYING_LEASE_MS: '60000',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  )
  const exit = finished(child, { killAfterMs: 30_000 })
  await new Promise<void>((resolve) =>
    child.stdout.on('data', (chunk) => String(chunk).includes('ticking') && resolve()),
  )
  child.kill('SIGKILL')
  await exit
  for (const k of [6, 9]) {
    await expireLease(pool, table, NIGHTLY)
    await withCronLease(pool, NIGHTLY, 1000, () => {}, at(k))
  }
}
after(async () => {
  for (const close of closers.reverse()) await close()
  await browser?.close()
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

async function open(url: string, options: Parameters<Browser['newContext']>[0] = {}): Promise<Page> {
  const context = await browser.newContext(options)
  closers.push(() => context.close())
  const page = await context.newPage()
  await page.goto(url)
  return page
}

const text = (content: string | null) => content ?? ''
const rowOf = (page: Page, name: string) => page.locator('#jobs tbody tr', { hasText: name }).first()

describe('the jobs page shows what the table holds', () => {
  test('one row per job, its state in words and symbol, holder and missed count', async () => {
    const page = await open(`${await serve()}/`)
    await page.locator('#jobs').waitFor()
    const leases = await listLeases(pool, { table })
    assert.equal(await page.locator('#jobs tbody tr').count(), leases.length)
    const billing = await rowOf(page, 'billing:daily').textContent().then(text)
    assert.match(billing, /✖\s*failing/)
    assert.match(billing, /web-2/)
    assert.match(billing, /error/)
    assert.match(await rowOf(page, 'cleanup').textContent().then(text), /⏸\s*paused until resumed/)
    assert.match(await rowOf(page, 'report:hourly').textContent().then(text), /web-1/)
    assert.match(
      await page.locator('#count').textContent().then(text),
      new RegExp(`${leases.length} of ${leases.length} jobs`),
    )
  })

  test('the filter box narrows the rows, and a header sorts them', async () => {
    const page = await open(`${await serve()}/`)
    await page.locator('#filter').fill('billing')
    await page.locator('#count', { hasText: /^1 of/ }).waitFor()
    assert.equal(await page.locator('#jobs tbody tr').count(), 1)
    await page.locator('#filter').fill('')
    await page.getByRole('button', { name: /^Holder/ }).click()
    assert.equal(
      await page.locator('#jobs tbody tr th').first().textContent().then(text),
      HOSTILE,
      "ascending by holder: '<' first",
    )
    await page.getByRole('button', { name: /^Holder/ }).click()
    assert.equal(
      await page.locator('#jobs tbody tr th').first().textContent().then(text),
      'evil\\u202egnp.exe\\x1b[31m',
    )
  })

  test('times show in the local zone, in UTC one click away, with relative times', async () => {
    const page = await open(`${await serve()}/`, { timezoneId: 'Asia/Kolkata' })
    const cell = rowOf(page, 'report:hourly').locator('time').first()
    await cell.waitFor()
    const local = await cell.textContent().then(text)
    assert.match(local, /ago|now/)
    assert.doesNotMatch(local, /UTC/)
    await page.locator('#zone').click()
    assert.match(await rowOf(page, 'report:hourly').locator('time').first().textContent().then(text), /UTC/)
    assert.notEqual(await rowOf(page, 'report:hourly').locator('time').first().textContent().then(text), local)
  })
})

describe("a job's page shows its history", () => {
  test('the occurrence strip holds the last runs and the misses between them, oldest first; the chart and the runs match', async () => {
    const runs = await listRuns(pool, { table, jobName: NIGHTLY })
    const expected = [...runs].reverse().flatMap((r) => [...Array(r.missed).fill('missed'), r.outcome])
    assert.deepEqual(expected, ['ok', 'ok', 'missed', 'missed', 'error', 'unfinished', 'ok', 'missed', 'missed', 'ok'])
    const page = await open(`${await serve()}/?job=${encodeURIComponent(NIGHTLY)}`)
    await page.locator('#strip').waitFor()
    const cells = await page
      .locator('#strip li')
      .evaluateAll((items) => items.map((i) => i.getAttribute('data-outcome')))
    assert.deepEqual(cells, expected)
    assert.equal(await page.locator('#chart rect').count(), runs.filter((r) => r.durationMs !== null).length)
    const rows = page.locator('#runs tbody tr')
    assert.equal(await rows.count(), runs.length)
    assert.match(await rows.nth(0).textContent().then(text), /ok/, 'newest first')
    assert.match(await rows.nth(2).textContent().then(text), /unfinished/)
    assert.match(await rows.nth(3).textContent().then(text), /report server down/)
    assert.match(await page.locator('#jobs, .facts').first().textContent().then(text), /web-4/)
  })
})

describe("a job's page, whatever the job's name and whatever its history", () => {
  test("jobs named '.' and '..' open, with their runs", async () => {
    const dots = await freshTable(pool, 'dash_dots')
    for (const name of ['.', '..']) await withCronLease(pool, name, 60_000, () => {}, { table: dots, holder: 'web-5' })
    const base = await serve({ table: dots })
    const page = await open(`${base}/`)
    for (const name of ['.', '..']) {
      await page.goto(`${base}/?job=${encodeURIComponent(name)}`)
      await page.locator('#runs').waitFor()
      assert.equal(await page.locator('h2').textContent(), name)
      assert.equal(await page.locator('#runs tbody tr').count(), 1, name)
      assert.match(await page.locator('#runs tbody tr').first().textContent().then(text), /ok/)
    }
  })

  test('runs that cannot be read show the reason, not "No runs recorded yet."', async () => {
    const bare = await freshTable(pool, 'dash_bare')
    await withCronLease(pool, 'solo', 60_000, () => {}, { table: bare, holder: 'web-6' })
    await pool.query(`DROP TABLE ${quoteTable(historyTableOf(bare))}`)
    const page = await open(`${await serve({ table: bare })}/?job=solo`)
    await page.locator('#runs-error').waitFor()
    assert.match(await page.locator('#runs-error').textContent().then(text), /has no run history.*migrate/)
    assert.doesNotMatch(await page.locator('main').textContent().then(text), /No runs recorded yet/)
  })
})

describe('a refresh keeps what the user was doing', () => {
  test('keyboard focus and a text selection survive the 5-second refresh, and Tab goes on from there', async () => {
    const page = await open(`${await serve()}/`)
    await rowOf(page, 'report:hourly').waitFor()
    await rowOf(page, 'report:hourly').locator('a').focus()
    // As strings: the page's globals are not this file's (its types have no DOM).
    await page.evaluate(`{
      const row = [...document.querySelectorAll('#jobs tbody tr')].find((r) => r.textContent.includes('billing:daily'))
      getSelection().selectAllChildren(row.querySelectorAll('td')[1])
      document.querySelector('#jobs').setAttribute('data-before', 'refresh')
    }`)
    const selected = String(await page.evaluate('getSelection().toString()'))
    assert.match(selected, /web-2/)
    // A table without the mark is one the refresh drew.
    await page.locator('#jobs:not([data-before])').waitFor({ timeout: 15_000 })
    assert.equal(await page.evaluate('document.activeElement.textContent'), 'report:hourly')
    assert.equal(await page.evaluate('getSelection().toString()'), selected)
    const order = await page.locator('#jobs tbody tr th a').evaluateAll((links) => links.map((l) => l.textContent))
    await page.keyboard.press('Tab')
    const next = await page.evaluate("document.activeElement.closest('tr')?.querySelector('th a')?.textContent")
    assert.equal(next, order[order.indexOf('report:hourly') + 1], 'Tab goes on to the next row')
  })
})

describe('hostile data renders inert and readable', () => {
  test('a job named with markup does not execute, and shows as the text it is', async () => {
    const page = await open(`${await serve()}/`)
    await page.locator('#jobs').waitFor()
    assert.equal(await page.locator('#jobs img').count(), 0)
    assert.ok((await rowOf(page, 'onerror').textContent().then(text)).includes(HOSTILE))
    await rowOf(page, 'onerror').locator('a').click()
    await page.locator('h2').waitFor()
    assert.equal(await page.locator('h2').textContent().then(text), HOSTILE)
    await page.waitForTimeout(300)
    assert.equal(await page.evaluate('window.__pwned'), undefined)
  })

  test('control and bidirectional-override characters show as escapes', async () => {
    const page = await open(`${await serve()}/`)
    const row = rowOf(page, 'gnp.exe')
    await row.waitFor()
    const shown = await row.textContent().then(text)
    assert.ok(shown.includes('evil\\u202egnp.exe\\x1b[31m'), shown)
    assert.ok(shown.includes('web\\u202e1'), shown)
    assert.ok(!shown.includes('\u202E'), 'no live override left in the page')
  })
})

describe('the token', () => {
  test('without it, a login form and no data; with it, the page loads', async () => {
    const base = await serve({ token: TOKEN })
    const page = await open(`${base}/`)
    assert.equal(await page.locator('#jobs').count(), 0)
    assert.doesNotMatch(await page.content(), /report:hourly/)
    await page.locator('#token').fill('wrong')
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.locator('.error').waitFor()
    await page.locator('#token').fill(TOKEN)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await rowOf(page, 'report:hourly').waitFor()
  })
})

describe('read-only and actions', () => {
  test('read-only: a job page has no buttons', async () => {
    const page = await open(`${await serve()}/?job=report%3Ahourly`)
    await page.locator('h2').waitFor()
    await page.locator('.facts').waitFor()
    assert.equal(await page.locator('main button').count(), 0)
    const list = await open(`${await serve()}/`)
    await list.locator('#jobs').waitFor()
    assert.equal(await list.locator('[data-action]').count(), 0)
  })

  test('with actions: the pause button pauses the job in the database, and Resume resumes it', async () => {
    const base = await serve({ token: TOKEN, allowActions: true })
    const page = await open(`${base}/?job=report%3Ahourly`, { extraHTTPHeaders: { authorization: `Bearer ${TOKEN}` } })
    const paused = async () => (await listLeases(pool, { table })).find((l) => l.jobName === 'report:hourly')?.paused
    await page.getByRole('button', { name: 'Pause report:hourly' }).click()
    await page.getByRole('button', { name: 'Resume report:hourly' }).waitFor()
    assert.equal(await paused(), true)
    assert.match(await page.locator('main .states').first().textContent().then(text), /paused until resumed/)
    await page.getByRole('button', { name: 'Resume report:hourly' }).click()
    await page.getByRole('button', { name: 'Pause report:hourly' }).waitFor()
    assert.equal(await paused(), false)
  })

  test('with actions: each row of the jobs page has the buttons too', async () => {
    const base = await serve({ token: TOKEN, allowActions: true })
    const page = await open(`${base}/`, { extraHTTPHeaders: { authorization: `Bearer ${TOKEN}` } })
    await rowOf(page, 'billing:daily').getByRole('button', { name: 'Pause' }).click()
    await rowOf(page, 'billing:daily').getByRole('button', { name: 'Resume' }).waitFor()
    assert.equal((await listLeases(pool, { table })).find((l) => l.jobName === 'billing:daily')?.paused, true)
    await rowOf(page, 'billing:daily').getByRole('button', { name: 'Resume' }).click()
    await rowOf(page, 'billing:daily').getByRole('button', { name: 'Pause' }).waitFor()
    assert.equal((await listLeases(pool, { table })).find((l) => l.jobName === 'billing:daily')?.paused, false)
  })
})

describe('the base path, at run time', () => {
  // A reverse proxy in front of the dashboard that serves it under /cron/: stripping the prefix
  // (the dashboard has no basePath), or keeping it (the dashboard is told basePath '/cron').
  async function proxied(strip: boolean): Promise<{ url: string; seen: string[] }> {
    const target = new URL(await serve(strip ? {} : { basePath: '/cron' }))
    const seen: string[] = []
    const url = await listen((req, res) => {
      seen.push(req.url ?? '')
      if (!req.url?.startsWith('/cron/')) return void res.writeHead(404).end('outside /cron/')
      const forwarded = http.request(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          headers: req.headers,
          path: strip ? req.url.slice(5) : req.url,
        },
        (reply) => {
          res.writeHead(reply.statusCode ?? 502, reply.headers)
          reply.pipe(res)
        },
      )
      req.pipe(forwarded)
    })
    return { url: `${url}/cron/`, seen }
  }

  for (const strip of [true, false]) {
    test(`every asset, API call and link works under /cron/ behind a proxy that ${strip ? 'strips' : 'keeps'} the prefix`, async () => {
      const { url, seen } = await proxied(strip)
      const page = await open(url)
      await rowOf(page, 'report:hourly').locator('a').click()
      await page.locator('.facts').waitFor()
      assert.equal(new URL(page.url()).pathname, '/cron/')
      await page.getByRole('link', { name: '← All jobs' }).click()
      await rowOf(page, 'report:hourly').waitFor()
      assert.deepEqual(
        seen.filter((u) => !u.startsWith('/cron/')),
        [],
      )
      assert.ok(seen.some((u) => u.startsWith('/cron/app.js')) && seen.some((u) => u.startsWith('/cron/api/jobs')))
    })
  }
})

describe('looks and liveness', () => {
  test('dark mode follows prefers-color-scheme', async () => {
    const base = await serve()
    const background = async (colorScheme: 'light' | 'dark') => {
      const page = await open(`${base}/`, { colorScheme })
      await page.locator('#jobs').waitFor()
      return page.evaluate('getComputedStyle(document.body).backgroundColor')
    }
    assert.equal(await background('light'), 'rgb(255, 255, 255)')
    assert.equal(await background('dark'), 'rgb(13, 17, 23)')
  })

  test('the first load is self-contained and at most 100 kB', async (t) => {
    const base = await serve()
    const context = await browser.newContext()
    closers.push(() => context.close())
    const page = await context.newPage()
    const sizes: Record<string, number> = {}
    page.on('response', async (reply) => {
      sizes[reply.url()] = (await reply.body().catch(() => Buffer.alloc(0))).length
    })
    const outside: string[] = []
    page.on('request', (request) => {
      if (!request.url().startsWith(base)) outside.push(request.url())
    })
    await page.goto(`${base}/`)
    await page.locator('#jobs').waitFor()
    await page.waitForLoadState('networkidle')
    const total = Object.values(sizes).reduce((a, b) => a + b, 0)
    t.diagnostic(`first load: ${total} bytes over ${Object.keys(sizes).length} requests`)
    assert.ok(total <= 100_000, `${total} bytes`)
    assert.deepEqual(outside, [])
  })

  test('an unreachable database shows a stale banner, and the page recovers by itself', async () => {
    const switchable = await cuttableProxy(new URL(await testDatabaseUrl()))
    const url = new URL(await testDatabaseUrl())
    url.port = String(switchable.port)
    const db = new pg.Pool({ connectionString: url.href, connectionTimeoutMillis: 1000 })
    db.on('error', () => {})
    closers.push(() => db.end())
    const page = await open(`${await serve({ db })}/`)
    await rowOf(page, 'report:hourly').waitFor()
    switchable.down(true)
    await page.locator('#stale').waitFor({ state: 'visible', timeout: 20_000 })
    assert.match(await page.locator('#stale').textContent().then(text), /Stale/)
    assert.equal(
      await page.locator('#jobs tbody tr').count(),
      (await listLeases(pool, { table })).length,
      'the last data stays',
    )
    switchable.down(false)
    await page.locator('#stale').waitFor({ state: 'hidden', timeout: 20_000 })
  })

  test('10,000 jobs load, filter and sort within a measured time', async (t) => {
    const many = await freshTable(pool, 'dash_many')
    await pool.query(
      `INSERT INTO ${quoteTable(many)} (job_name, lease_until, holder, claimed_at, last_outcome, last_finished_at, last_duration_ms, every_ms)
       SELECT 'job:' || lpad(i::text, 5, '0'), clock_timestamp() - interval '1 second', 'web-' || (i % 7), clock_timestamp() - interval '2 minutes',
              CASE WHEN i % 13 = 0 THEN 'error' ELSE 'ok' END, clock_timestamp() - interval '90 seconds', i % 1000, 60000
       FROM generate_series(1, 10000) AS i`,
    )
    const base = await serve({ table: many })
    const context = await browser.newContext()
    closers.push(() => context.close())
    const page = await context.newPage()
    const started = performance.now()
    await page.goto(`${base}/`)
    await page.locator('#count', { hasText: '10000 of 10000 jobs' }).waitFor({ timeout: 60_000 })
    const loaded = performance.now() - started
    const filtering = performance.now()
    await page.locator('#filter').fill('job:0999')
    await page.locator('#count', { hasText: /^10 of 10000/ }).waitFor({ timeout: 30_000 })
    const filtered = performance.now() - filtering
    const sorting = performance.now()
    await page.locator('#filter').fill('')
    await page.getByRole('button', { name: /^Job/ }).click()
    await page.locator('#jobs tbody tr th', { hasText: 'job:10000' }).first().waitFor({ timeout: 30_000 })
    const sorted = performance.now() - sorting
    t.diagnostic(
      `10,000 jobs: loaded in ${Math.round(loaded)} ms, filtered in ${Math.round(filtered)} ms, sorted in ${Math.round(sorted)} ms`,
    )
    // Bounds for a loaded 2-core machine; the measured times are in the diagnostic above.
    assert.ok(loaded < 30_000, `loaded in ${loaded} ms`)
    assert.ok(filtered < 10_000 && sorted < 10_000, `filter ${filtered} ms, sort ${sorted} ms`)
    assert.equal(await page.locator('#jobs tbody tr').count(), 500, 'a page of rows is drawn, with Show more')
  })
})

/** A TCP forwarder to Postgres that can be taken down (every connection cut, new ones refused) and back up. */
async function cuttableProxy(target: URL): Promise<{ port: number; down(on: boolean): void }> {
  let isDown = false
  const open = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    if (isDown) return void socket.destroy()
    const upstream = net.connect(Number(target.port), target.hostname)
    open.add(socket)
    socket.on('close', () => {
      open.delete(socket)
      upstream.destroy()
    })
    socket.on('error', () => upstream.destroy())
    upstream.on('error', () => socket.destroy())
    socket.pipe(upstream).pipe(socket)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  closers.push(() => {
    for (const socket of open) socket.destroy()
    server.close()
  })
  return {
    port: (server.address() as AddressInfo).port,
    down(on) {
      isDown = on
      if (on) for (const socket of open) socket.destroy()
    },
  }
}
