/**
 * What a statement writes, measured from the server's counters: transaction IDs and WAL bytes.
 */
import type pg from 'pg'

/**
 * Transaction IDs and WAL bytes per call of `lose`, over `samples` runs of `losses` calls each.
 * Neither probe writes: the snapshot's xmax is the next ID to be handed out, and the insert LSN is
 * where the next WAL record would go. Other sessions (autovacuum, checkpoints) can add to a
 * sample, so the smallest sample is what the statement itself costs.
 */
export async function writeCost(
  pool: pg.Pool,
  lose: () => Promise<unknown>,
  { losses = 20, samples = 5 }: { losses?: number; samples?: number } = {},
): Promise<{ xidsPerLoss: number; walBytesPerLoss: number }> {
  const probe = async () =>
    (
      await pool.query(
        `SELECT txid_snapshot_xmax(txid_current_snapshot())::text::bigint AS xid, pg_current_wal_insert_lsn()::text AS lsn`,
      )
    ).rows[0]
  const taken: { xids: number; walBytes: number }[] = []
  for (let s = 0; s < samples; s++) {
    const start = await probe()
    for (let i = 0; i < losses; i++) await lose()
    const end = await probe()
    const { rows } = await pool.query('SELECT pg_wal_lsn_diff($1, $2)::bigint AS bytes', [end.lsn, start.lsn])
    taken.push({ xids: Number(end.xid) - Number(start.xid), walBytes: Number(rows[0].bytes) })
  }
  return {
    xidsPerLoss: Math.min(...taken.map((s) => s.xids)) / losses,
    walBytesPerLoss: Math.min(...taken.map((s) => s.walBytes)) / losses,
  }
}
