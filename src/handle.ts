/** What the library learns of each handle (a Pool, a client, an adapter), kept as long as the handle lives. */
import type { Shape } from './sql.js'

export interface TableKnowledge {
  shape: Shape | undefined
  /** The table has its run history (historyTableOf) that this role may write. */
  history: boolean
  readAt: number
  reading: Promise<Shape | undefined> | undefined
  /** This process's clock minus the database's, and when (monotonic ms). */
  clock: { offsetMs: number; at: number } | undefined
  /** How many more claims go without the probe (`claim` in src/lease.ts). */
  unprobed: number
}

export interface Sending {
  readonly named: boolean
  readonly client: boolean
  readonly status: (() => unknown) | null
}

export interface HandleState {
  readonly tables: Map<string, TableKnowledge>
  unprepared: boolean
  sending: Sending | undefined
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
  return tableEntry(handleState(db).tables, table, newKnowledge)
}

function newKnowledge(): TableKnowledge {
  return { shape: undefined, history: false, readAt: 0, reading: undefined, clock: undefined, unprobed: 0 }
}

// At most 100 tables in a per-table cache; the first added goes first.
export function tableEntry<V>(map: Map<string, V>, table: string, make: () => V): V {
  let entry = map.get(table)
  if (entry === undefined) {
    if (map.size >= 100) map.delete(map.keys().next().value as string)
    entry = make()
    map.set(table, entry)
  }
  return entry
}
