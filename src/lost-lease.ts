/** Why a tick's lease was lost, told to the tick: read only when a renew or beat matched no row. */
import { runStatement } from './query.js'
import { lostLeaseSql } from './sql.js'
import { firstRow, type Ticket } from './ticket.js'

const UNKNOWN = 'it expired or another claim replaced it'

// `early`: the renew came back before the lease could run out, so someone ended it. A failed read: reason unknown.
export async function whyLost({ config, kind, claimToken }: Ticket, early: boolean): Promise<string> {
  const { db, table, jobName } = config
  const shape = kind === 'original' ? 'original' : 'current'
  const row = await runStatement(db, lostLeaseSql(table, shape), [jobName, claimToken], false).then(
    (result) => firstRow(result) ?? null,
    () => undefined,
  )
  if (row === undefined) return UNKNOWN
  if (row === null) return 'its row is no longer in the table'
  if (row.same_claim !== true) return 'another claim replaced it'
  if (row.paused === true) {
    const until = row.paused_until === 'infinity' ? 'until resumed' : `until ${String(row.paused_until)}`
    return `the job was paused ${until} (pauseJob or pg-cron-lease pause)`
  }
  if (row.held !== false) return UNKNOWN
  return early ? 'it was released (releaseLease or pg-cron-lease release)' : 'it expired'
}
