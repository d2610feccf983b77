/** The tick's context: fenced renew, fence, abort signal (saying why a lease was lost), keep-alive beats. */
import { publishDrainAbort, publishLost, publishRenew } from './channels.js'
import { LeaseLostError } from './errors.js'
import { codeOf, runStatement, statementsOf, transactionStatus, underSavepoint } from './query.js'
import { firstRow, readResult } from './result.js'
import { fenceSql, lostLeaseSql } from './sql.js'
import type { ClaimConfig, Ticket } from './ticket.js'
import type { KeepAlive, LeaseContext, Queryable } from './types.js'
import { checkMs, checkQueryable } from './validate.js'

// A row lock outside a transaction ends with its statement; a handle that cannot say is told by the fence's savepoint.
function checkTransactionClient(client: unknown): Queryable {
  const checked = checkQueryable(client, 'client')
  const handle = checked as { Client?: unknown; totalCount?: unknown; getTransactionStatus?: () => unknown }
  if (typeof handle.Client === 'function' && 'totalCount' in handle)
    throw new TypeError(
      "pg-cron-lease: fence(client) needs the client of an open transaction, got a pg Pool (each query may run on another connection): check out a client with pool.connect() and send 'BEGIN' first",
    )
  if (typeof handle.getTransactionStatus === 'function' && handle.getTransactionStatus() === 'I')
    throw new TypeError(
      "pg-cron-lease: fence(client) needs a client with a transaction open, got a pg client outside any transaction (getTransactionStatus() is 'I'): send 'BEGIN' first",
    )
  return checked
}

// Called once the handle has sent a statement, so a pg before 8.21 can tell its transaction status.
export function checkKeepAliveHandle({ db, jobName, keepAlive }: ClaimConfig): void {
  if (keepAlive === undefined) return
  const status = transactionStatus(db)
  if (status !== 'T' && status !== 'E' && status !== '?') return
  const got =
    status === '?'
      ? 'a pg client whose transaction state cannot be read (pg-native before pg 8.21)'
      : `a handle inside a transaction (its transaction status is '${status}')`
  throw new TypeError(
    `pg-cron-lease: opts.keepAlive cannot keep the lease for '${jobName}' alive through ${got}: each beat there ` +
      'would run under a savepoint, a subtransaction of its own, and past 64 in one transaction every snapshot on ' +
      'the cluster, standbys included, reads pg_subtrans; pass the pool (the claim and its beats then run outside ' +
      'your transaction), or leave keepAlive out and call ctx.renew() from the tick; nothing was claimed and the ' +
      'tick did not run',
  )
}

const UNKNOWN = 'it expired or another claim replaced it'

// `early`: the renew came back before the lease could run out, so someone ended it. A failed read: reason unknown.
async function whyLost({ config, kind, claimToken }: Ticket, early: boolean): Promise<string> {
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

function refused(jobName: string, call: 'renew' | 'fence', settled: boolean): Error {
  const head = `pg-cron-lease: cannot ${call === 'renew' ? 'renew' : 'fence on'} the lease for '${jobName}': `
  if (settled) return new Error(`${head}its tick has settled; the lease is held until it expires`)
  return new TypeError(
    `${head}the claim's result had no row to read its claim token from, so a ${call} could not prove the lease is still this claim`,
  )
}

/** The won claim's context; `close()` once the tick settled, resolving once the renews already sent have. */
export function openContext(ticket: Ticket) {
  const { db, table, jobName, holder, leaseMs, prepare, keepAlive } = ticket.config
  const { claimToken, occurrence, missed } = ticket
  const { renew } = statementsOf(table, ticket.kind)
  let controller: AbortController | undefined
  let abortedWith: Error | undefined
  const abort = (reason: Error) => {
    // The first reason stands: a shutdown's, or a lost lease's.
    if (abortedWith !== undefined) return
    abortedWith = reason
    controller?.abort(reason)
  }
  // Made on the first read of ctx.signal (see Context); aborting it again keeps its first reason.
  const signal = () => {
    controller ??= new AbortController()
    if (abortedWith !== undefined) controller.abort(abortedWith)
    return controller.signal
  }
  const live = () => !closed && abortedWith === undefined
  let closed = false
  let beatTimer: NodeJS.Timeout | undefined
  let deadlineTimer: NodeJS.Timeout | undefined
  // The earliest the lease can end, on this process's clock: the database's clock_timestamp() read came later.
  let expiresAt = ticket.sentAt + leaseMs

  let lost = false
  const lose = (why: string) => {
    if (lost) return
    lost = true
    publishLost(ticket, why)
    abort(new Error(`pg-cron-lease: the lease for '${jobName}' was lost: ${why}`))
  }

  // One at a time, so the last reply is from the last statement run and alone says where the lease ends.
  let queue: Promise<unknown> = Promise.resolve()
  function serially<T>(send: () => Promise<T>): Promise<T> {
    const turn = queue.then(send)
    queue = turn.catch(() => {})
    return turn
  }

  // With keep-alive the library promised to notice a lapse: no beat landing before the lease can end aborts the tick.
  function setExpiresAt(at: number) {
    expiresAt = at
    clearTimeout(deadlineTimer)
    if (!keepAlive || !live()) return
    const ms = Math.max(0, expiresAt - performance.now())
    deadlineTimer = setTimeout(() => lose('it ran out before a keep-alive beat could extend it'), ms).unref()
  }

  async function extend(ms: number, beat: boolean): Promise<boolean> {
    if (claimToken === null) throw refused(jobName, 'renew', false)
    const sentAt = performance.now()
    // A renew can shorten the lease long before its reply comes back (if ever): watch the shorter end from now on.
    if (!beat) setExpiresAt(Math.min(expiresAt, sentAt + ms))
    const result = await runStatement(db, renew, [jobName, ms, claimToken, beat], prepare)
    const { matched: renewed } = readResult(result, jobName, 'renewed')
    publishRenew(() => ({ run: ticket.run, jobName, holder, renewed, ms }))
    if (!renewed) lose(await whyLost(ticket, performance.now() < expiresAt))
    else setExpiresAt(beat ? Math.max(expiresAt, sentAt + ms) : sentAt + ms)
    return renewed
  }

  function scheduleBeat({ beatMs, extendMs }: KeepAlive) {
    beatTimer = setTimeout(async () => {
      // A failed beat is retried by the next; the deadline aborts if none lands in time.
      await serially(async () => live() && (await extend(extendMs, true))).catch(() => {})
      if (live()) scheduleBeat({ beatMs, extendMs })
    }, beatMs).unref()
  }

  if (keepAlive) {
    setExpiresAt(expiresAt)
    scheduleBeat(keepAlive)
  }

  const renewLease = async (ms: number = leaseMs) => {
    // A context kept past its tick would otherwise extend a lease nothing is using any more.
    if (closed) throw refused(jobName, 'renew', true)
    const checked = checkMs(ms, 'renew(ms)')
    return serially(() => extend(checked, false))
  }
  const fence = async (client: Queryable) => {
    if (closed) throw refused(jobName, 'fence', true)
    const inTransaction = checkTransactionClient(client)
    if (claimToken === null) throw refused(jobName, 'fence', false)
    // Not queued with the renews: it does not move the lease, and a wait on a racing claim's row lock must not
    // hold up the beats. The savepoint's refusal says no transaction is open; its rollback keeps one usable.
    const result = await underSavepoint(inTransaction, fenceSql(table), [jobName, claimToken]).catch(
      (error: unknown) => {
        if (codeOf(error) !== '25P01') throw error
        throw new TypeError(
          `pg-cron-lease: fence(client) for '${jobName}' ran outside any transaction, where its row lock would ` +
            'end with the statement: pass the handle of an open transaction (a client after BEGIN, or your query ' +
            "builder's transaction object); nothing was locked",
        )
      },
    )
    if (readResult(result, jobName, 'fenced').matched) return
    lose('another claim replaced it')
    throw new LeaseLostError(jobName, claimToken)
  }
  return {
    ctx: new Context(jobName, holder, leaseMs, claimToken, occurrence, missed, renewLease, fence, signal),
    close() {
      closed = true
      clearTimeout(beatTimer)
      clearTimeout(deadlineTimer)
      // A beat or renew already sent can land after the tick settled: the record goes after it.
      return queue
    },
    stop(reason: Error) {
      publishDrainAbort(ticket, reason)
      abort(reason)
    },
  }
}

// ctx.signal is made on first read: an AbortController costs a won claim about 5 µs, and most ticks never read it.
// A class, as an object literal's getter is made anew per claim at much that cost (docs/performance.md).
class Context implements LeaseContext {
  readonly #signal: () => AbortSignal

  constructor(
    readonly jobName: string,
    readonly holder: string,
    readonly leaseMs: number,
    readonly claimToken: string | null,
    readonly occurrence: Date | null,
    readonly missed: number,
    readonly renew: LeaseContext['renew'],
    readonly fence: LeaseContext['fence'],
    signal: () => AbortSignal,
  ) {
    this.#signal = signal
    Object.freeze(this)
  }

  get signal(): AbortSignal {
    return this.#signal()
  }
}
