/** `@Leased()` swaps the method as the class is defined: @nestjs/schedule binds it in a hook we cannot order. */
import { Logger } from '@nestjs/common'
import { argumentError } from '../errors.js'
import { OPTIONS } from '../options.js'
import { checkMs, checkOptions } from '../validate.js'

const LEASED_METADATA = 'pg-cron-lease:leased'

/** Options of `@Leased()`; an unknown key is a `TypeError` when the class is defined. */
export interface LeasedOptions {
  /** The lease in ms, rounded to whole ms (1 to `MAX_LEASE_MS`). Default: from the schedule (docs/nestjs.md#the-decorator). */
  leaseMs?: number
  /** Run a missed occurrence once at start, if due unclaimed within `withinMs` (`catchUp`). Default: off. */
  catchUp?: { withinMs: number }
}

export interface LeasedMethod {
  readonly label: string
  readonly options: Readonly<LeasedOptions>
  readonly original: (...args: unknown[]) => unknown
}

export type FireLeased = (method: LeasedMethod, instance: object, args: unknown[]) => Promise<unknown>

/** Each instance's application, weakly, so a closed application's instances (and pools) go with it. */
export const bindings = new WeakMap<object, FireLeased>()

const NAME = '@Leased() options'

/**
 * Beside `@Cron`, `@Interval` or `@Timeout`, makes the method a singleton across replicas: only the
 * fire that claims its occurrence runs, with the `LeaseContext` last; it never rejects (docs/nestjs.md).
 * @example
 * \@Cron('0 * * * *', { name: 'report:hourly' })
 * \@Leased()
 * async send(ctx: LeaseContext) { await sendReport({ signal: ctx.signal }) }
 */
export function Leased(options?: LeasedOptions): MethodDecorator {
  const { leaseMs, catchUp } = checkOptions(options, ['leaseMs', 'catchUp'], NAME)
  const checked: Readonly<LeasedOptions> = Object.freeze({
    ...(leaseMs !== undefined && { leaseMs: checkMs(leaseMs, `${NAME}.leaseMs`) }),
    ...(catchUp !== undefined && { catchUp: OPTIONS.catchUp.check(catchUp, `${NAME}.catchUp`, { leaseMs: 0 }) }),
  })
  return (target, key, descriptor) => {
    const original = descriptor.value as LeasedMethod['original'] | undefined
    const owner = typeof target === 'function' ? target : target.constructor
    const label = `${owner.name}.${String(key)}`
    if (typeof original !== 'function') throw argumentError('@Leased()', `goes on a method; ${label} is not one`)
    if (leasedMethod(original) !== undefined) throw argumentError('@Leased()', `is on ${label} twice`)
    const method: LeasedMethod = Object.freeze({ label, options: checked, original })
    let warned = false
    const wrapper = async function (this: object, ...args: unknown[]): Promise<unknown> {
      const fire = bindings.get(this)
      if (fire !== undefined) return fire(method, this, args)
      const why = 'belongs to no application that imports PgCronLeaseModule (or that application has closed)'
      if (!warned) new Logger('PgCronLease').error(`${label} fired, but its instance ${why}: not run`)
      warned = true
    }
    Object.defineProperty(wrapper, 'name', { value: original.name })
    // Decorators applied before this one set metadata on the original: move it to the wrapper.
    for (const name of Reflect.getMetadataKeys?.(original) ?? [])
      Reflect.defineMetadata(name, Reflect.getMetadata(name, original), wrapper)
    Reflect.defineMetadata(LEASED_METADATA, method, wrapper)
    descriptor.value = wrapper as typeof descriptor.value
    return descriptor
  }
}

export function leasedMethod(fn: unknown): LeasedMethod | undefined {
  return typeof fn === 'function' ? Reflect.getMetadata?.(LEASED_METADATA, fn) : undefined
}
