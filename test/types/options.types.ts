/**
 * Type tests (checked by `tsc --noEmit`, never run): each option is declared once, and the key
 * lists the validators use name every declared option, so a new option cannot pass one entry
 * point's check and be rejected (or dropped) by another.
 */
import type {
  JobOptions,
  LeaseCoordinatorOptions,
  LeasedTickOptions,
  LeaseOptions,
  ListLeasesOptions,
  PauseOptions,
} from '../../src/index.ts'
import type { LEASE_OPTION_KEYS } from '../../src/types.ts'

type Exactly<Keys, Declared> = [Exclude<Declared, Keys>, Exclude<Keys, Declared>] extends [never, never] ? true : false

export const leaseKeysComplete: Exactly<(typeof LEASE_OPTION_KEYS)[number], keyof LeaseOptions> = true

// Every entry point's options are picked from LeaseOptions: the same key means the same thing.
export const tickExtendsLease: LeasedTickOptions extends LeaseOptions ? true : false = true
export const coordinatorPicks: Omit<LeaseCoordinatorOptions, 'leaseMs'> extends Partial<LeaseOptions> ? true : false =
  true
export const listPicks: Omit<ListLeasesOptions, 'overdueFactor'> extends Partial<LeaseOptions> ? true : false = true
export const jobPicks: JobOptions extends Pick<LeaseOptions, 'table'> ? true : false = true
export const pausePicks: PauseOptions extends JobOptions ? true : false = true

// @ts-expect-error: a key list that misses an option does not compile
export const incomplete: Exactly<'holder' | 'table', keyof LeaseOptions> = true
