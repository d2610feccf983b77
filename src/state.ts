/**
 * What the library remembers between calls, all of it in this one file, each with its bound:
 *
 * - per table (process-wide, by table name): the statements built for it, each with its prepared
 *   statement name, and the warnings already given about it (once per table per process, whatever
 *   handle reached it). At most {@link TABLES} tables; past that the one used least recently is
 *   dropped, and built again, warnings included, if it comes back.
 * - per handle (a pool, client or adapter object): whether a pooler in front of it refused a
 *   prepared statement, after which it is sent plain text for good; which of its tables have the
 *   occurrence columns, and its clock offset per table ({@link handleState}, at most TABLES tables
 *   each). Held in WeakMaps, so an ended and dropped pool takes its state with it.
 * - per process: the job names already accepted by the checks, at most {@link NAMES} (the set is
 *   emptied when full), so the few names that come back on every tick are looked up, not checked.
 *
 * What is known of a table's shape comes from won claims' replies, which say it for free (see
 * claimSql): whether it can take the outcome record is read from each, and whether it has the
 * occurrence columns is kept per handle once a reply said so, so an upgrade is seen from the next
 * won claim on, with no restart and no shape probe.
 */
import { createHash } from 'node:crypto'
import {
  catchUpSql,
  claimSql,
  clockSql,
  extendSql,
  keyClaimSql,
  occurrenceClaimSql,
  probingClaimSql,
  recordOutcomeSql,
  renewSql,
} from './sql.js'

/** One statement's text and the name it is prepared under. */
export interface Statement {
  readonly text: string
  /** One name per text, so a connection that prepared one text is never asked to run another under it. */
  readonly name: string
}

/** What is kept for one table. */
export interface TableState {
  readonly claim: Statement
  readonly renew: Statement
  readonly extend: Statement
  readonly record: Statement
  readonly occurrenceClaim: Statement
  readonly probingClaim: Statement
  readonly keyClaim: Statement
  readonly catchUp: Statement
  /** One reading of the database clock. */
  readonly clockRead: Statement
  /** The warnings given for this table: the key says what each was about (a job name, or a topic). */
  readonly warned: Set<string>
  /** When it was last used, on the use counter. */
  usedAt: number
}

/** How many tables are remembered at once. */
export const TABLES = 100

/** How many accepted job names are remembered at once. */
export const NAMES = 1000

const tables = new Map<string, TableState>()

/** The state of `table`, built on first use. */
export function tableState(table: string): TableState {
  let state = tables.get(table)
  if (state !== undefined) {
    // Marked, not moved: this runs on every claim, and the eviction below is what pays to find
    // the least recently used.
    state.usedAt = ++uses
    return state
  }
  state = {
    claim: statement(claimSql(table)),
    renew: statement(renewSql(table)),
    extend: statement(extendSql(table)),
    record: statement(recordOutcomeSql(table)),
    occurrenceClaim: statement(occurrenceClaimSql(table)),
    probingClaim: statement(probingClaimSql(table)),
    keyClaim: statement(keyClaimSql(table)),
    catchUp: statement(catchUpSql(table)),
    clockRead: statement(clockSql()),
    warned: new Set(),
    usedAt: ++uses,
  }
  if (tables.size >= TABLES) {
    let oldest: string | undefined
    let oldestAt = Number.POSITIVE_INFINITY
    for (const [name, { usedAt }] of tables) {
      if (usedAt < oldestAt) {
        oldest = name
        oldestAt = usedAt
      }
    }
    tables.delete(oldest as string)
  }
  tables.set(table, state)
  return state
}

// A use counter, for telling which table was used least recently.
let uses = 0

function statement(text: string): Statement {
  return Object.freeze({ text, name: `pg_cron_lease_${createHash('sha256').update(text).digest('hex').slice(0, 24)}` })
}

/**
 * Gives `warning` once per table per process: `about` names what it is about (a job for a
 * per-job warning, a topic for a per-table one). `clear` ends a condition (a clock back in sync),
 * so the same warning is given again if it returns.
 */
export function warnOnce(table: string, about: string, warning: () => void): void {
  const { warned } = tableState(table)
  if (warned.has(about)) return
  warned.add(about)
  warning()
}

/** Ends a condition {@link warnOnce} warned about. */
export function clearWarning(table: string, about: string): void {
  tables.get(table)?.warned.delete(about)
}

/**
 * What one handle (a pool, client or adapter) has learnt of the tables it reached. Kept per handle,
 * not per table name: one process may reach two databases, or two schemas through search_path,
 * whose tables of one name have different shapes or clocks.
 */
export interface HandleState {
  /**
   * The tables a won claim through this handle said have the occurrence columns: only to those is
   * a statement sent that names them. A claim refused for a missing column (42703) unlearns it.
   */
  readonly keyed: Set<string>
  /**
   * This process's clock minus the database's, per table, as last estimated (a won claim, or a
   * loser's read of the clock), and when (monotonic ms): what a losing keyed claim judges its
   * occurrence by.
   */
  readonly clocks: Map<string, { offsetMs: number; at: number }>
}

const handles = new WeakMap<object, HandleState>()

/** The state of handle `db`, made on first use; each of its sets holds at most {@link TABLES} tables. */
export function handleState(db: object): HandleState {
  let state = handles.get(db)
  if (state === undefined) {
    state = { keyed: new Set(), clocks: new Map() }
    handles.set(db, state)
  }
  if (state.keyed.size > TABLES) state.keyed.clear()
  if (state.clocks.size > TABLES) state.clocks.clear()
  return state
}

const unprepared = new WeakSet<object>()

/** Marks `db` as behind a pooler that refuses prepared statements: plain text from now on. */
export function markUnprepared(db: object): void {
  unprepared.add(db)
}

/** Whether `db` has fallen back to plain text for good. */
export function isUnprepared(db: object): boolean {
  return unprepared.has(db)
}

const acceptedNames = new Set<string>()

/** Whether a job name was accepted before. */
export function isAcceptedName(jobName: string): boolean {
  return acceptedNames.has(jobName)
}

/** Remembers an accepted job name; a long one is not kept, so the memory held stays small. */
export function acceptName(jobName: string): void {
  if (jobName.length > 200) return
  if (acceptedNames.size >= NAMES) acceptedNames.clear()
  acceptedNames.add(jobName)
}
