/**
 * What the library remembers between calls, all of it in this one file, each with its bound:
 *
 * - per handle (a pool, client or adapter object), in a WeakMap, so an ended and dropped pool takes
 *   its state with it: for each table it reached, the table's shape and when it was read, and this
 *   process's clock offset against the database; and whether a pooler in front of it refused a
 *   prepared statement, after which it is sent plain text for good. At most {@link TABLES} tables
 *   a handle. A handle made anew for every call (a `pg.Client` per tick) knows nothing and reads
 *   the table's shape on each call: one catalog statement more per call.
 * - per table name and shape (process-wide): the statements built for it, each with its prepared
 *   statement name; and per table name the warnings already given about it (once per table per
 *   process, whatever handle reached it). At most {@link TABLES} of each; past that the oldest is
 *   dropped, and built again, warnings included, if it comes back.
 * - per process: the job names already accepted by the checks, at most {@link NAMES} (the set is
 *   emptied when full), so the few names that come back on every tick are looked up, not checked.
 */
import { createHash } from 'node:crypto'
import { claimSql, recordOutcomeSql, renewSql, type Shape, tableFactsSql } from './sql.js'

/** One statement's text and the name it is prepared under. */
export interface Statement {
  readonly text: string
  /** One name per text, so a connection that prepared one text is never asked to run another under it. */
  readonly name: string
}

/** The hot statements of one table of one shape. */
export interface Statements {
  readonly claim: Statement
  readonly renew: Statement
  /** The outcome record; the current shape only. */
  readonly record: Statement
}

/** How many tables are remembered at once, per handle and process-wide. */
export const TABLES = 100

/** How many accepted job names are remembered at once. */
export const NAMES = 1000

/** The one catalog statement, with its prepared name. */
export const TABLE_FACTS: Statement = statement(tableFactsSql())

const built = new Map<string, Statements>()

/** The statements for `table` of `shape`, built on first use. */
export function statementsOf(table: string, shape: Shape): Statements {
  const key = `${shape}:${table}`
  let statements = built.get(key)
  if (statements !== undefined) return statements
  statements = {
    claim: statement(claimSql(table, shape)),
    renew: statement(renewSql(table, shape)),
    record: statement(recordOutcomeSql(table)),
  }
  // The one built first goes: a process with more than TABLES tables rebuilds what comes back.
  if (built.size >= TABLES) built.delete(built.keys().next().value as string)
  built.set(key, statements)
  return statements
}

function statement(text: string): Statement {
  return Object.freeze({ text, name: `pg_cron_lease_${createHash('sha256').update(text).digest('hex').slice(0, 24)}` })
}

const warned = new Map<string, Set<string>>()

/**
 * Gives `warning` once per table per process: `about` names what it is about (a job for a
 * per-job warning, a topic for a per-table one). {@link clearWarning} ends a condition (a clock
 * back in sync), so the same warning is given again if it returns.
 */
export function warnOnce(table: string, about: string, warning: () => void): void {
  let given = warned.get(table)
  if (given === undefined) {
    if (warned.size >= TABLES) warned.delete(warned.keys().next().value as string)
    given = new Set()
    warned.set(table, given)
  }
  if (given.has(about)) return
  given.add(about)
  warning()
}

/** Ends a condition {@link warnOnce} warned about. */
export function clearWarning(table: string, about: string): void {
  warned.get(table)?.delete(about)
}

/** What one handle knows of one table. */
export interface TableKnowledge {
  /** The shape, as last read; undefined until read (or while the table does not exist). */
  shape: Shape | undefined
  /** When the shape was last read (monotonic ms). */
  readAt: number
  /** A read in flight, so claims racing the first use send one catalog statement, not one each. */
  reading: Promise<Shape | undefined> | undefined
  /** This process's clock minus the database's, as last estimated, and when (monotonic ms). */
  clock: { offsetMs: number; at: number } | undefined
}

/** What one handle knows: see the top of this file. */
export interface HandleState {
  readonly tables: Map<string, TableKnowledge>
  /** A pooler in front of it refused a prepared statement: plain text from now on. */
  unprepared: boolean
}

const handles = new WeakMap<object, HandleState>()

/** The state of handle `db`, made on first use. */
export function handleState(db: object): HandleState {
  let state = handles.get(db)
  if (state === undefined) {
    state = { tables: new Map(), unprepared: false }
    handles.set(db, state)
  }
  return state
}

/** What handle `db` knows of `table`, made on first use. */
export function knowledgeOf(db: object, table: string): TableKnowledge {
  const { tables } = handleState(db)
  let known = tables.get(table)
  if (known === undefined) {
    if (tables.size >= TABLES) tables.delete(tables.keys().next().value as string)
    known = { shape: undefined, readAt: 0, reading: undefined, clock: undefined }
    tables.set(table, known)
  }
  return known
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
