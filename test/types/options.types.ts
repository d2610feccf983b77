/**
 * Type tests (checked by `tsc --noEmit`, never run): each entry point's public option interface
 * has exactly the keys the options table (src/options.ts) gives that entry point, so a new option
 * cannot be declared and rejected, or accepted and undeclared.
 */
import type {
  DrainOptions,
  JobOptions,
  LeaseCoordinatorOptions,
  LeasedTickOptions,
  LeaseOptions,
  ListLeasesOptions,
  PauseOptions,
} from '../../src/index.ts'
import type { OptionsOf } from '../../src/options.ts'

type Exactly<Keys, Declared> = [Exclude<Declared, Keys>, Exclude<Keys, Declared>] extends [never, never] ? true : false

export const leaseKeys: Exactly<OptionsOf<'withCronLease'>, keyof LeaseOptions> = true
export const tickKeys: Exactly<OptionsOf<'leasedTick'>, keyof LeasedTickOptions> = true
export const coordinatorKeys: Exactly<OptionsOf<'leaseCoordinator'>, keyof LeaseCoordinatorOptions> = true
export const listKeys: Exactly<OptionsOf<'listLeases'>, keyof ListLeasesOptions> = true
export const pauseKeys: Exactly<OptionsOf<'pauseJob'>, keyof PauseOptions> = true
export const resumeKeys: Exactly<OptionsOf<'resumeJob'>, keyof JobOptions> = true
export const releaseKeys: Exactly<OptionsOf<'releaseLease'>, keyof JobOptions> = true
export const drainKeys: Exactly<OptionsOf<'drainLeases'>, keyof DrainOptions> = true

// Every entry point's options are picked from LeaseOptions: the same key means the same thing.
export const tickExtendsLease: LeasedTickOptions extends LeaseOptions ? true : false = true
export const coordinatorPicks: Omit<LeaseCoordinatorOptions, 'leaseMs'> extends Partial<LeaseOptions> ? true : false =
  true
export const listPicks: Omit<ListLeasesOptions, 'overdueFactor'> extends Partial<LeaseOptions> ? true : false = true
export const jobPicks: JobOptions extends Pick<LeaseOptions, 'table'> ? true : false = true
export const pausePicks: PauseOptions extends JobOptions ? true : false = true

// @ts-expect-error: a key list that misses an option does not compile
export const incomplete: Exactly<'holder' | 'table', keyof LeaseOptions> = true
