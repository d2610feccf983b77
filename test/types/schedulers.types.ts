/**
 * Type tests (checked by `tsc --noEmit`, never run): the scheduler adapters' public types accept
 * what users write and reject what they should not.
 */
import { Cron } from 'croner'
import cron, { type RunCoordinator, type ScheduledTask } from 'node-cron'
import {
  type LeaseCoordinator,
  type LeasedTick,
  type LeaseOutcome,
  leaseCoordinator,
  leasedTick,
  type Queryable,
} from '../../src/index.ts'

declare const db: Queryable

// A leasedTick goes straight to every scheduler.
const tick: LeasedTick<number> = leasedTick(db, 'job', 800, () => 1)
new Cron('* * * * * *', tick)
cron.schedule('* * * * * *', tick)
setInterval(tick, 1000)
setTimeout(tick, 1000)

// Called directly, it resolves the outcome or undefined.
export async function direct(): Promise<LeaseOutcome<number> | undefined> {
  const outcome = await tick()
  // @ts-expect-error the outcome may be undefined (after an error)
  outcome.ran
  // @ts-expect-error the result is a number or null, not a string
  const wrong: string | null | undefined = outcome?.result
  void wrong
  return outcome
}

// The tick receives the context; async ticks infer their result.
leasedTick(db, 'job', 800, async (ctx) => ctx.renew()) satisfies LeasedTick<boolean>
leasedTick(db, 'job', 800, () => 1, { onError: async (error: unknown, jobName: string) => void [error, jobName] })
// @ts-expect-error an unknown option is a type error as well as a runtime TypeError
leasedTick(db, 'job', 800, () => 1, { tabel: 'x' })
// @ts-expect-error onError receives (error, jobName)
leasedTick(db, 'job', 800, () => 1, { onError: (error: unknown, jobName: number) => void [error, jobName] })

// A leaseCoordinator is a node-cron RunCoordinator, per task or global.
const coordinator: RunCoordinator = leaseCoordinator(db, { leaseMs: (task: string) => (task === 'a' ? 800 : 1600) })
cron.setRunCoordinator(leaseCoordinator(db))
cron.schedule('* * * * * *', () => {}, { name: 'a', distributed: true, runCoordinator: leaseCoordinator(db) })
leaseCoordinator(db, { leaseMs: 800, table: 'jobs.leases', holder: 'h', logger: console }) satisfies LeaseCoordinator
// @ts-expect-error leaseMs is a number or a function of the task name
leaseCoordinator(db, { leaseMs: '800' })
// @ts-expect-error keepAlive belongs to leasedTick and withCronLease: the coordinator runs no tick
leaseCoordinator(db, { keepAlive: { beatMs: 100, extendMs: 500 } })
void coordinator

// watch takes what cron.schedule returns and gives the same task back, so it wraps the call.
const watching = leaseCoordinator(db)
const watched: ScheduledTask = watching.watch(
  cron.schedule('* * * * * *', () => {}, { name: 'a', distributed: true, runCoordinator: watching }),
)
void watched
// @ts-expect-error a value without on(event, listener) is not a node-cron task
watching.watch({ name: 'a' })
// @ts-expect-error the task's name is a string
watching.watch({ name: 1, on: () => {} })
