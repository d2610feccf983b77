/** Reaching the database: where, the optional `pg` driver, one client a command; passwords never shown. */
import type pg from 'pg'
import { ERROR_CODES } from '../errors.js'
import { oneLine } from '../format-value.js'
import { migrateCommand } from '../log.js'
import { BIN, Exit, failed, type Target, usage } from './args.js'

const CONNECT_TIMEOUT_MS = 10_000

type Doing = { command: string; table: string }

export type Connect = <T>(target: Target, doing: Doing, work: (client: pg.Client) => Promise<T>) => Promise<T>

export function connectionTarget(url: string | undefined, env: Readonly<Record<string, string | undefined>>): Target {
  const source = url !== undefined ? '--url' : 'DATABASE_URL'
  const text = url ?? env.DATABASE_URL
  if (text === undefined || text === '')
    throw usage('no database to connect to: pass --url postgres://user:password@host:5432/db or set DATABASE_URL')
  if (!URL.canParse(text))
    throw usage(`${source} is not a URL; expected postgres://user:password@host:5432/db, got ${masked(text)}`)
  const parsed = new URL(text)
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:')
    throw usage(`${source} must start with postgres:// or postgresql://, got ${masked(text)}`)
  const user = decodePart(parsed.username, 'user name', source)
  decodePart(parsed.password, 'password', source)
  decodePart(parsed.hostname, 'host', source)
  const database = decodePart(parsed.pathname.slice(1), 'database name', source)
  decodePart(parsed.search, 'parameters', source)
  const host = parsed.hostname || parsed.searchParams.get('host') || 'localhost'
  return { url: text, label: `${host}:${parsed.port || '5432'}/${database || user || 'postgres'}` }
}

/** What was typed, quoted, every password masked; not by parsing, as a malformed URL may still hold one. */
export function masked(text: string): string {
  const start = /^[a-z][a-z0-9+.-]*:\/\//i.exec(text)?.[0].length ?? 0
  // user:***@ up to the last @: a password typed with a raw @ in it is still masked whole.
  const at = text.lastIndexOf('@')
  const colon = text.indexOf(':', start)
  let shown = at > start && colon !== -1 && colon < at ? `${text.slice(0, colon + 1)}***${text.slice(at)}` : text
  // A keyword string's value ends at white space (unless quoted), a query parameter's at & or #.
  shown = shown
    .replace(/(^|\s)(\w*password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)/gi, '$1$2***')
    .replace(/([?&])(\w*password=)([^&#]+)/gi, '$1$2***')
  return JSON.stringify(shown)
}

// pg re-encodes some malformed URLs wholesale: say which part is wrong, without showing it.
function decodePart(text: string, part: string, source: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    throw usage(
      `${source} has a malformed percent-encoding in its ${part}: each % must start an escape of UTF-8 bytes such as %40; write a literal % as %25`,
    )
  }
}

// pg is an optional peer dependency: only the commands that reach the database need it.
function pgMissing(error: unknown): never {
  const { code, message } = error as { code?: string; message?: string }
  if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && /'pg'/.test(message ?? ''))
    throw failed(
      'the "pg" package is not installed, and this command needs it to reach the database: run npm install pg (the sql command works without it)',
    )
  throw error
}

function connection(target: Target) {
  return { connectionString: target.url, application_name: BIN }
}

/** One more client, connected; rejects with the driver's error. The caller ends it. */
export async function openClient(target: Target): Promise<pg.Client> {
  const { Client } = (await import('pg').catch(pgMissing)).default
  const client = new Client({ ...connection(target), connectionTimeoutMillis: CONNECT_TIMEOUT_MS })
  // A connection lost mid-query rejects that query; without a listener it would also crash the process.
  client.on('error', () => {})
  const started = performance.now()
  try {
    await client.connect()
  } catch (error) {
    await client.end().catch(() => {})
    // pg's own connect timeout carries no code: told apart by the time it took, never by its words.
    if ((error as { code?: unknown })?.code === undefined && performance.now() - started >= CONNECT_TIMEOUT_MS) {
      const timeout = new Error(`no answer within ${CONNECT_TIMEOUT_MS / 1000} s`, { cause: error })
      throw Object.assign(timeout, { code: 'ETIMEDOUT' })
    }
    throw error
  }
  return client
}

export const withClient: Connect = async (target, doing, work) => {
  let client: pg.Client | undefined
  try {
    client = await openClient(target)
    return await work(client)
  } catch (error) {
    throw error instanceof Exit ? error : failed(explain(error, target.label, doing))
  } finally {
    await client?.end().catch(() => {})
  }
}

/** A pool for a long-lived command; a query waiting for a lent-out connection waits without a deadline. */
export async function openPool(target: Target, connectTimeoutMs = CONNECT_TIMEOUT_MS): Promise<pg.Pool> {
  const { Pool, Client } = (await import('pg').catch(pgMissing)).default
  // The pool's own connectionTimeoutMillis would also fail a wait for a free client, as an unreachable database would.
  class TimedClient extends Client {
    constructor(config?: pg.ClientConfig) {
      super({ ...config, connectionTimeoutMillis: connectTimeoutMs })
    }
  }
  const pool = new Pool({ ...connection(target), max: 4, Client: TimedClient })
  // An idle connection lost (a restart) is dropped; without a listener it would crash the process.
  pool.on('error', () => {})
  return pool
}

function explain(error: unknown, where: string, { command, table }: Doing): string {
  const code = (error as { code?: unknown })?.code
  const said = oneLine(error)
  switch (code) {
    case 'ECONNREFUSED':
      return `cannot connect to ${where}: connection refused; check that Postgres runs there and that --url or DATABASE_URL names the right host and port`
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `cannot connect to ${where}: the host name does not resolve; check the host in --url or DATABASE_URL`
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `cannot connect to ${where}: ${said}; check the host and port in --url or DATABASE_URL, and that the network lets you through`
    // The server answered: these are limits of the session, not a connection that failed.
    case '57014':
      return `the database cancelled ${command} in ${where}: a statement ran past statement_timeout (or was cancelled by hand) (SQLSTATE 57014); raise statement_timeout for this role, or find what holds a lock on ${table} (pg_locks)`
    case '55P03':
      return `${command} waited past lock_timeout for a lock on ${table} in ${where} (SQLSTATE 55P03); another session holds it: find it in pg_locks, or raise lock_timeout`
    case '28P01':
    case '28000':
      return `cannot log in to ${where}: ${said}; check the user and password in --url or DATABASE_URL`
    case '3D000':
      return `cannot connect to ${where}: ${said}; check the database name in --url or DATABASE_URL`
    case '42P01':
      return `the lease table ${table} does not exist in ${where}; create it with: ${migrateCommand(table)} (same --url)`
    case '3F000':
      return `${said}, so ${table} cannot be created; create the schema first (CREATE SCHEMA ...) or choose another --table`
    case '42501':
      return `${said} in ${where}; connect as a role that may ${command === 'migrate' ? 'create the table' : command === 'status' || command === 'check' ? 'read the table' : 'update the table'}`
    case ERROR_CODES.ROW_LOCKED:
      return said.replace(/^pg-cron-lease: /, '').replaceAll('opts.lockTimeoutMs', '--lock-timeout')
    case '42703':
      // No statement names a column a lease table may lack, so this is not a lease table.
      return `${table} in ${where} is not a pg-cron-lease table (${said}); check --table`
  }
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code))
    return `the database refused ${command}: ${said} (SQLSTATE ${code})`
  // A refusal by the library (a table without the columns a change needs) already says what to do.
  return `${command} failed against ${where}: ${said.replace(/^pg-cron-lease: /, '')}`
}
