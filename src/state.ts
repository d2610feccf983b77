/**
 * What the library remembers between calls, each with its bound: per handle (WeakMap), each
 * table's shape and clock offset, and whether prepared statements were refused; process-wide, the
 * statements built and warnings given per table, and accepted job names.
 */
import { createHash } from 'node:crypto'
import {
  type ClaimKind,
  catchUpSql,
  claimSql,
  probeSql,
  recordOutcomeSql,
  recordRunSql,
  renewSql,
  type Shape,
  tableFactsSql,
} from './sql.js'

/** A statement's text and its prepared name, one per text, so a connection never runs another text under it. */
export type Statement = { readonly text: string; readonly name: string }

/**
 * The hot statements of one table for one kind of claimant (see {@link ClaimKind}): all but `claim`
 * and `renew` are the current shape's. `record` writes the lease row alone; `recordRun` also the
 * run's row in the history.
 */
export type Statements = {
  readonly [K in 'probe' | 'claim' | 'catchUp' | 'renew' | 'record' | 'recordRun']: Statement
}

/** How many tables are remembered at once, per handle and process-wide. */
const TABLES = 100

/** How many accepted job names are remembered at once. */
const NAMES = 1000

export const TABLE_FACTS: Statement = statement(tableFactsSql())

const KINDS: readonly ClaimKind[] = ['original', 'lease', 'run', 'history']

// Per table, its statements of each kind: keyed by the table alone, as a key made of both on every
// claim cost more than the statement's lookup.
const built = new Map<string, Array<Statements | undefined>>()

/** The statements for `table` and a claimant of `kind`, built on first use. */
export function statementsOf(table: string, kind: ClaimKind): Statements {
  const ofTable = built.get(table) ?? remember(built, table, [])
  const at = KINDS.indexOf(kind)
  ofTable[at] ??= Object.freeze({
    probe: statement(probeSql(table)),
    claim: statement(claimSql(table, kind)),
    catchUp: statement(catchUpSql(table, kind === 'original' ? 'lease' : kind)),
    renew: statement(renewSql(table, kind === 'original' ? 'original' : 'current')),
    record: statement(recordOutcomeSql(table)),
    recordRun: statement(recordRunSql(table)),
  })
  return ofTable[at]
}

// Past TABLES entries the one added first goes; it is made again if it comes back.
function remember<V>(map: Map<string, V>, key: string, value: V): V {
  if (map.size >= TABLES) map.delete(map.keys().next().value as string)
  map.set(key, value)
  return value
}

function statement(text: string): Statement {
  return Object.freeze({ text, name: `pg_cron_lease_${createHash('sha256').update(text).digest('hex').slice(0, 24)}` })
}

const warned = new Map<string, Set<string>>()

/** True once per table per process for a warning about a job or topic, until {@link clearWarning}. */
export function firstWarning(table: string, about: string): boolean {
  const given = warned.get(table) ?? remember(warned, table, new Set())
  if (given.has(about)) return false
  given.add(about)
  return true
}

/** Ends a condition {@link firstWarning} allowed a warning about. */
export function clearWarning(table: string, about: string): void {
  warned.get(table)?.delete(about)
}

/** What one handle knows of one table. */
export interface TableKnowledge {
  shape: Shape | undefined
  /** The table has its run history (historyTableOf), so claims that record their runs write their rows there. */
  history: boolean
  readAt: number
  /** A read in flight: racing first claims send one catalog statement. */
  reading: Promise<Shape | undefined> | undefined
  /** This process's clock minus the database's, and when (monotonic ms). */
  clock: { offsetMs: number; at: number } | undefined
  /**
   * How many more claims go without the probe: a claim the probe did not stop (a win, or a loss in
   * a dead heat, where every probe ran before the winner committed) sets it to UNPROBED_CLAIMS,
   * each claim sent without it takes one off, and a failed claim sets it to 0.
   */
  unprobed: number
}

/** How statements go through one handle, decided once (src/query.ts). */
export interface Sending {
  /** A `pg` Pool or client: takes `query({ name, text, values })`. */
  readonly named: boolean
  /** A `pg` client: it is the connection its statements run on. */
  readonly client: boolean
  /** Reads 'I', 'T' or 'E' as pg names them ('?' not known yet); null for a handle that cannot tell. */
  readonly status: (() => unknown) | null
}

export interface HandleState {
  readonly tables: Map<string, TableKnowledge>
  unprepared: boolean
  sending: Sending | undefined
  /** Which server connection an adapter is on, asked once (src/query.ts); a pg client is its own. */
  connection: Promise<unknown> | undefined
}

const handles = new WeakMap<object, HandleState>()

export function handleState(db: object): HandleState {
  let state = handles.get(db)
  if (state === undefined) {
    state = { tables: new Map(), unprepared: false, sending: undefined, connection: undefined }
    handles.set(db, state)
  }
  return state
}

export function knowledgeOf(db: object, table: string): TableKnowledge {
  const { tables } = handleState(db)
  return (
    tables.get(table) ??
    remember(tables, table, {
      shape: undefined,
      history: false,
      readAt: 0,
      reading: undefined,
      clock: undefined,
      unprobed: 0,
    })
  )
}

const acceptedNames = new Set<string>()

/** Whether a job name was accepted before. */
export function isAcceptedName(jobName: string): boolean {
  return acceptedNames.has(jobName)
}

/** Remembers an accepted job name; a long one is not kept. */
export function acceptName(jobName: string): void {
  if (jobName.length > 200) return
  if (acceptedNames.size >= NAMES) acceptedNames.clear()
  acceptedNames.add(jobName)
}
