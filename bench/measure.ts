/**
 * Timing and server-side accounting for `npm run bench`: latency samples, percentiles, and the
 * transaction IDs and WAL bytes the server spent between two points.
 */
import type pg from 'pg'

/** Nanosecond-resolution monotonic milliseconds, for the samples. */
export function clockMs(): number {
  return Number(process.hrtime.bigint()) / 1e6
}

/** The nearest-rank percentile of sorted samples. */
export function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[rank]!
}

export interface ServerMark {
  /** The first transaction ID not yet completed. Reading it assigns none (unlike txid_current()). */
  xid: bigint
  lsn: string
}

/** Where the server's transaction counter and WAL insert position stand now. */
export async function mark(observer: pg.Client): Promise<ServerMark> {
  const { rows } = await observer.query(
    'SELECT txid_snapshot_xmax(txid_current_snapshot())::text AS xid, pg_current_wal_insert_lsn()::text AS lsn',
  )
  return { xid: BigInt(rows[0].xid), lsn: rows[0].lsn }
}

/** Transaction IDs consumed and WAL bytes written between two marks (by every session). */
export async function spent(observer: pg.Client, from: ServerMark): Promise<{ xids: number; wal: number }> {
  const to = await mark(observer)
  const { rows } = await observer.query('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8 AS wal', [
    to.lsn,
    from.lsn,
  ])
  return { xids: Number(to.xid - from.xid), wal: Number(rows[0].wal) }
}

/** Samples of one case, gathered over several blocks, and the server work of each block. */
export class Series {
  readonly samples: number[] = []
  /** Per block: operations, elapsed ms, xids and WAL bytes per operation. */
  readonly blocks: Array<{ ops: number; ms: number; xidsPerOp: number; walPerOp: number }> = []

  /**
   * Runs `op` for about `blockMs` (at least `minOps` times), one at a time, timing each, between
   * two server marks. `op(i)` gets a running index across blocks.
   */
  async block(observer: pg.Client, op: (i: number) => Promise<void>, blockMs: number, minOps = 20): Promise<void> {
    const before = await mark(observer)
    const start = clockMs()
    let ops = 0
    for (; ops < minOps || clockMs() - start < blockMs; ops++) {
      const t0 = clockMs()
      await op(this.samples.length)
      this.samples.push(clockMs() - t0)
      if (ops > 1_000_000) break
    }
    const ms = clockMs() - start
    const { xids, wal } = await spent(observer, before)
    this.blocks.push({ ops, ms, xidsPerOp: xids / ops, walPerOp: wal / ops })
  }

  stats(): Stats {
    const sorted = [...this.samples].sort((a, b) => a - b)
    const ops = this.blocks.reduce((n, b) => n + b.ops, 0)
    const ms = this.blocks.reduce((n, b) => n + b.ms, 0)
    return {
      ops,
      p50: percentile(sorted, 0.5),
      p90: percentile(sorted, 0.9),
      p99: percentile(sorted, 0.99),
      opsPerSec: (ops / ms) * 1000,
      // Other sessions (autovacuum, the checkpointer, the WAL of a standby snapshot) can only add,
      // so the quietest block is the closest reading of what the operation itself costs.
      xidsPerOp: Math.min(...this.blocks.map((b) => b.xidsPerOp)),
      walPerOp: Math.min(...this.blocks.map((b) => b.walPerOp)),
    }
  }
}

export interface Stats {
  ops: number
  p50: number
  p90: number
  p99: number
  opsPerSec: number
  xidsPerOp: number
  walPerOp: number
}
