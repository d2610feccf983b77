/**
 * Timing and server-side accounting for `npm run bench`: latency samples, percentiles, and the
 * transaction IDs and WAL bytes the server spent between two points.
 */
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import type pg from 'pg'

/**
 * Nanosecond-resolution monotonic milliseconds, for the samples.
 *
 * @example
 * const t0 = clockMs(); await db.query('SELECT 1'); const ms = clockMs() - t0
 */
export function clockMs(): number {
  return Number(process.hrtime.bigint()) / 1e6
}

/**
 * The nearest-rank percentile of sorted samples.
 *
 * @example
 * percentile([1, 2, 3, 4], 0.5) // 2
 */
export function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[rank]!
}

/**
 * Where the server's counters stood at one moment.
 *
 * @example
 * const before: ServerMark = await mark(observer)
 */
export interface ServerMark {
  /** The first transaction ID not yet completed. Reading it assigns none (unlike txid_current()). */
  xid: bigint
  lsn: string
}

/**
 * Where the server's transaction counter and WAL insert position stand now.
 *
 * @example
 * const before = await mark(observer)
 */
export async function mark(observer: pg.Client): Promise<ServerMark> {
  const { rows } = await observer.query(
    'SELECT txid_snapshot_xmax(txid_current_snapshot())::text AS xid, pg_current_wal_insert_lsn()::text AS lsn',
  )
  return { xid: BigInt(rows[0].xid), lsn: rows[0].lsn }
}

/**
 * Transaction IDs consumed and WAL bytes written between two marks (by every session).
 *
 * @example
 * const before = await mark(observer)
 * await db.query(claimSql('cron_leases'), ['job', 1000, 'me'])
 * const { xids, wal } = await spent(observer, before)
 */
export async function spent(observer: pg.Client, from: ServerMark): Promise<{ xids: number; wal: number }> {
  const to = await mark(observer)
  const { rows } = await observer.query('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8 AS wal', [
    to.lsn,
    from.lsn,
  ])
  return { xids: Number(to.xid - from.xid), wal: Number(rows[0].wal) }
}

/** Clock ticks per second of /proc's CPU counters. */
function ticksPerSecond(): number {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
  } catch {
    return 100
  }
}

/** User + system clock ticks of one process so far, from /proc/PID/stat; undefined once it has ended. */
function processTicks(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // "pid (comm) state ppid …": fields counted from after the last ')', as comm may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return Number(fields[11]) + Number(fields[12])
  } catch {
    return undefined
  }
}

/**
 * The CPU time (user + system, in ms) each process of a set had used at one moment, by pid.
 *
 * @example
 * const before: CpuMark = cpu()
 */
export type CpuMark = Map<number, number>

/**
 * The CPU time spent between two marks: each process's growth, counting a process that started
 * in between from zero. A process that ended in between is left out (its last reading is gone);
 * it is never subtracted, as a plain difference of totals would do.
 *
 * @example
 * const before = cpu(); await work(); const ms = cpuMsBetween(before, cpu())
 */
export function cpuMsBetween(before: CpuMark, after: CpuMark): number {
  let ms = 0
  for (const [pid, now] of after) ms += now - (before.get(pid) ?? 0)
  return ms
}

/**
 * A reader of the CPU time used so far by every process of a local server: the postmaster and its
 * children (the backends, the WAL writer, autovacuum). Only for a server whose data directory this
 * process can read (the embedded one); `undefined` otherwise.
 *
 * @example
 * const cpu = serverCpu(server.dataDir)
 * const before = cpu?.() // a CpuMark, or undefined for a remote server
 */
export function serverCpu(dataDir: string | undefined): (() => CpuMark) | undefined {
  if (!dataDir || process.platform !== 'linux') return undefined
  let postmaster: number
  try {
    postmaster = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
  } catch {
    return undefined
  }
  const msPerTick = 1000 / ticksPerSecond()
  return () => {
    const mark: CpuMark = new Map()
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
        if (Number(entry) !== postmaster && ppid !== postmaster) continue
        const ticks = processTicks(Number(entry))
        if (ticks !== undefined) mark.set(Number(entry), ticks * msPerTick)
      } catch {
        // The process ended while the list was read.
      }
    }
    return mark
  }
}

/**
 * A reader of the CPU time used so far by the given server backends (`pg_backend_pid()` of each
 * connection): the work of serving those sessions alone, without the WAL writer, the checkpointer
 * or autovacuum. Linux and a local server only; `undefined` otherwise.
 *
 * @example
 * const pids = await Promise.all(conns.map(async (c) => (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid))
 * const cpu = backendCpu(pids, server.dataDir)
 */
export function backendCpu(pids: number[], dataDir: string | undefined): (() => CpuMark) | undefined {
  if (!dataDir || process.platform !== 'linux') return undefined
  const msPerTick = 1000 / ticksPerSecond()
  return () => {
    const mark: CpuMark = new Map()
    for (const pid of pids) {
      const ticks = processTicks(pid)
      if (ticks !== undefined) mark.set(pid, ticks * msPerTick)
    }
    return mark
  }
}

/**
 * Samples of one case: its latencies, timed one call at a time (by {@link Series.time} or inside
 * a block), and the server work of each block.
 *
 * @example
 * const s = new Series()
 * await s.block(observer, () => db.query('SELECT 1').then(() => {}), 500)
 * const { p50, xidsPerOp } = s.stats()
 */
export class Series {
  readonly samples: number[] = []
  /** Per block: operations, elapsed ms, xids and WAL bytes per operation, server and client CPU. */
  readonly blocks: Array<{
    ops: number
    ms: number
    xidsPerOp: number
    walPerOp: number
    serverCpuMs: number | null
    clientCpuUs: number
  }> = []
  private calls = 0

  /** Times one call of `op`, which gets a running index across every call of this series. */
  async time(op: (i: number) => Promise<void>): Promise<void> {
    const t0 = clockMs()
    await op(this.calls++)
    this.samples.push(clockMs() - t0)
  }

  /**
   * Runs `op` for about `blockMs` (at least `minOps` times), one at a time, between two server
   * marks, for the transaction IDs, WAL and server CPU per call. Each call is also a latency
   * sample unless `timed` is false (when the latencies come from {@link Series.time} instead).
   */
  async block(
    observer: pg.Client,
    op: (i: number) => Promise<void>,
    blockMs: number,
    minOps = 20,
    cpu?: () => CpuMark,
    timed = true,
  ): Promise<void> {
    const cpuBefore = cpu?.()
    const before = await mark(observer)
    // This process's CPU, the driver's included; read inside the marks so their queries do not count.
    const clientBefore = process.cpuUsage()
    const start = clockMs()
    let ops = 0
    for (; ops < minOps || clockMs() - start < blockMs; ops++) {
      if (timed) await this.time(op)
      else await op(this.calls++)
      if (ops > 1_000_000) break
    }
    const ms = clockMs() - start
    const client = process.cpuUsage(clientBefore)
    const { xids, wal } = await spent(observer, before)
    const serverCpuMs = cpu && cpuBefore !== undefined ? cpuMsBetween(cpuBefore, cpu()) : null
    this.blocks.push({
      ops,
      ms,
      xidsPerOp: xids / ops,
      walPerOp: wal / ops,
      serverCpuMs,
      clientCpuUs: client.user + client.system,
    })
  }

  stats(): Stats {
    const sorted = [...this.samples].sort((a, b) => a - b)
    const blockOps = this.blocks.reduce((n, b) => n + b.ops, 0)
    return {
      ops: sorted.length,
      p50: percentile(sorted, 0.5),
      p90: percentile(sorted, 0.9),
      p99: percentile(sorted, 0.99),
      // Calls per second of the case's own time: one call at a time, back to back.
      opsPerSec: (sorted.length / sorted.reduce((n, ms) => n + ms, 0)) * 1000,
      // Other sessions (autovacuum, the checkpointer, the WAL of a standby snapshot) can only add,
      // so the quietest block is the closest reading of what the operation itself costs.
      xidsPerOp: Math.min(...this.blocks.map((b) => b.xidsPerOp)),
      walPerOp: Math.min(...this.blocks.map((b) => b.walPerOp)),
      // The server's CPU over all blocks (its clock ticks are 10 ms, so only a sum is meaningful);
      // it includes the two marks per block and whatever else the server did meanwhile.
      serverCpuUsPerOp: this.blocks.every((b) => b.serverCpuMs !== null)
        ? (this.blocks.reduce((n, b) => n + b.serverCpuMs!, 0) / blockOps) * 1000
        : null,
      clientCpuUsPerOp: blockOps > 0 ? this.blocks.reduce((n, b) => n + b.clientCpuUs, 0) / blockOps : null,
    }
  }
}

/**
 * What a {@link Series} measured.
 *
 * @example
 * const { p50, p99, opsPerSec } = series.stats()
 */
export interface Stats {
  ops: number
  p50: number
  p90: number
  p99: number
  opsPerSec: number
  xidsPerOp: number
  walPerOp: number
  /** Server CPU time per operation, in µs; `null` when the server is not local. */
  serverCpuUsPerOp: number | null
  /** This process's CPU time (user and system) per operation in its blocks, in µs; `null` with no block. */
  clientCpuUsPerOp: number | null
}

/**
 * A shuffle (Fisher-Yates) driven by a small seeded generator, so every run draws the same orders.
 *
 * @example
 * const shuffle = shuffler(1)
 * shuffle(['a', 'b', 'c']) // the same permutation on every run
 */
export function shuffler(seed: number): <T>(items: readonly T[]) => T[] {
  let state = seed >>> 0
  // xorshift32: plenty for picking orders, and the same sequence on every machine.
  const next = () => {
    state ^= state << 13
    state >>>= 0
    state ^= state >>> 17
    state ^= state << 5
    state >>>= 0
    return state / 0x1_0000_0000
  }
  return (items) => {
    const out = [...items]
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(next() * (i + 1))
      ;[out[i], out[j]] = [out[j]!, out[i]!]
    }
    return out
  }
}
