/** `pg-cron-lease dashboard`: createDashboard on a port of its own, until Ctrl-C or SIGTERM. */
import { once } from 'node:events'
import { readFileSync, statSync } from 'node:fs'
import http from 'node:http'
import { isIP } from 'node:net'
import { createDashboard } from '../dashboard/dashboard.js'
import { oneLine } from '../format-value.js'
import { listLeases } from '../listings.js'
import { checkDashboardToken } from '../options.js'
import { BIN, type Command, DATABASE_EXIT, failed, usage, valid } from './args.js'
import { connectionTarget, openPool } from './connect.js'

// The token is read from here or a file: argv would show it to anyone running `ps`.
const TOKEN_VARIABLE = 'PG_CRON_LEASE_DASHBOARD_TOKEN'

export const dashboard: Command = {
  summary: 'Serve the jobs and their runs as web pages, JSON, /metrics and /healthz',
  options: ['table', 'url', 'host', 'port', 'base-path', 'allow-actions', 'allowed-host', 'token-file'],
  details:
    `Serves the dashboard (docs/dashboard.md) and prints the URL it listens on. The token, when\n` +
    `set, comes from --token-file or else the ${TOKEN_VARIABLE} variable, never from an\n` +
    'argument, where ps shows it; with one, every page and endpoint needs it. A token must be at\n' +
    'least 16 characters, and its file readable by its owner only (chmod 600). Beyond loopback\n' +
    '(--host other than 127.0.0.1, ::1 or localhost) it refuses to start without a token; without\n' +
    'one it answers only requests for localhost, 127.0.0.1, [::1] and each --allowed-host. It is\n' +
    'read-only unless --allow-actions is given with a token. Stops on Ctrl-C or SIGTERM.\n\n' +
    'Examples:\n' +
    `  ${BIN} dashboard --port 8080\n` +
    `  ${TOKEN_VARIABLE}=$(cat /run/secrets/dash) ${BIN} dashboard --host 0.0.0.0 --allow-actions`,
  exitCodes: `0 stopped by a signal, ${DATABASE_EXIT}, 2 usage error (or no token beyond loopback, a short token, a token file others may read)`,
  async run({ host, port, table, basePath, allowActions, allowedHosts, tokenFile, url }, context) {
    const token = readToken(tokenFile, context.env)
    if (token === undefined && !loopback(host))
      throw usage(
        `refusing to listen on ${host} without a token: anyone who can reach it could read every job; set ${TOKEN_VARIABLE} or pass --token-file, or listen on 127.0.0.1`,
      )
    // One read first, through the command's connection: a wrong URL or table is an exit 1 that says what to do.
    await context.connect((client) => listLeases(client, { table }))
    const pool = await openPool(connectionTarget(url, context.env))
    const handler = createDashboard({ db: pool, table, basePath, token, allowActions, allowedHosts })
    const server = http.createServer(handler).listen(port, host)
    await once(server, 'listening').catch(async (error) => {
      await pool.end()
      throw failed(`cannot listen on ${host}:${port}: ${oneLine(error)}`)
    })
    const { port: bound } = server.address() as { port: number }
    const mode = allowActions && token !== undefined ? 'actions allowed' : 'read-only'
    context.out(`Dashboard of ${table} (${mode}${token === undefined ? '' : ', token required'}) at:\n`)
    context.out(`http://${isIP(host) === 6 ? `[${host}]` : host}:${bound}${basePath.replace(/\/?$/, '/')}\n`)
    if (allowActions && token === undefined)
      context.out(`--allow-actions needs a token (${TOKEN_VARIABLE} or --token-file): actions stay off.\n`)
    // Both listeners go at the first signal, so a second one ends the process as it would by default.
    const signals = new AbortController()
    await Promise.race(['SIGINT', 'SIGTERM'].map((name) => once(process, name, { signal: signals.signal })))
    signals.abort()
    const closed = new Promise((resolve) => server.close(resolve))
    server.closeAllConnections()
    await closed
    await pool.end()
  },
}

function readToken(file: string | undefined, env: Readonly<Record<string, string | undefined>>): string | undefined {
  if (file === undefined) {
    const text = env[TOKEN_VARIABLE]?.trim()
    return text ? valid(() => checkDashboardToken(text, TOKEN_VARIABLE)) : undefined
  }
  const shown = JSON.stringify(file)
  let text: string
  let mode: number
  try {
    text = readFileSync(file, 'utf8').trim()
    mode = statSync(file).mode & 0o777
  } catch (error) {
    throw usage(`cannot read --token-file ${shown}: ${oneLine(error)}`)
  }
  // Group and others: on Windows the mode says nothing of who may read the file.
  if ((mode & 0o077) !== 0 && process.platform !== 'win32')
    throw usage(
      `--token-file ${shown} may be read or written by others (mode ${mode.toString(8).padStart(4, '0')}): anyone on this machine could take the token or change it; run chmod 600 ${shown}`,
    )
  // A file usually ends in a newline that is not part of the token.
  if (text === '') throw usage(`--token-file ${shown} is empty`)
  return valid(() => checkDashboardToken(text, `the token in --token-file ${shown}`))
}

const loopback = (host: string) => host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host)
