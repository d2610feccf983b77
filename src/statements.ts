/** Each table's hot statements, built once per process, each with the prepared name its text earns. */
import { createHash } from 'node:crypto'
import { tableEntry } from './handle.js'
import {
  type ClaimKind,
  catchUpSql,
  claimSql,
  probeSql,
  recordOutcomeSql,
  recordRunSql,
  renewSql,
  tableFactsSql,
} from './sql.js'

/** A statement's text and its prepared name, one per text, so a connection never runs another text under it. */
export type Statement = { readonly text: string; readonly name: string }

/** A table's hot statements for one kind of claimant: all but `claim` and `renew` are the current shape's. */
export type Statements = { readonly [K in 'probe' | 'claim' | 'catchUp' | 'renew' | 'record' | 'recordRun']: Statement }

export const TABLE_FACTS: Statement = statement(tableFactsSql())

// By table, then kind: a key made of both cost more than the lookup.
type OfTable = Partial<Record<ClaimKind, Statements>>
const built = new Map<string, OfTable>()
const newTable = (): OfTable => ({})

export function statementsOf(table: string, kind: ClaimKind): Statements {
  const ofTable = tableEntry(built, table, newTable)
  ofTable[kind] ??= Object.freeze({
    probe: statement(probeSql(table)),
    claim: statement(claimSql(table, kind)),
    catchUp: statement(catchUpSql(table, kind === 'original' ? 'lease' : kind)),
    renew: statement(renewSql(table, kind === 'original' ? 'original' : 'current')),
    record: statement(recordOutcomeSql(table)),
    recordRun: statement(recordRunSql(table)),
  })
  return ofTable[kind]
}

function statement(text: string): Statement {
  return Object.freeze({ text, name: `pg_cron_lease_${createHash('sha256').update(text).digest('hex').slice(0, 24)}` })
}
