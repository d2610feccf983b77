/**
 * `@Leased()` replaces the method on the prototype at decoration time: @nestjs/schedule binds
 * whatever method the instance has in a hook we cannot order against, so the wrapper must already
 * be there. Each instance is bound to its application at start, so two applications share it.
 */
import { Logger } from '@nestjs/common'
import { MAX_LEASE_MS } from '../presets.js'
import { shown } from './options.js'

/** The metadata key `@Leased()` sets on the wrapper. */
export const LEASED_METADATA = 'pg-cron-lease:leased'

/**
 * Options of `@Leased()`; an unknown key is a `TypeError` when the class is defined.
 *
 * @example
 * const opts: LeasedOptions = { leaseMs: 45_000, catchUp: { withinMs: 6 * 3_600_000 } }
 */
export interface LeasedOptions {
  /**
   * The lease, in whole ms (1 to `MAX_LEASE_MS`). Default: 80% of a `@Cron`'s shortest gap,
   * `forInterval(ms)` for an `@Interval`, a minute for a `@Timeout`.
   */
  leaseMs?: number
  /** Run a missed occurrence once at start, if due unclaimed within `withinMs` (`catchUp`). Default: off. */
  catchUp?: { withinMs: number }
}

/** What the decorator knows of one leased method, the same for every application. */
export interface LeasedMethod {
  readonly className: string
  readonly methodName: string
  readonly options: Readonly<LeasedOptions>
  /** Called with the scheduler's arguments and the `LeaseContext` last. */
  readonly original: (...args: unknown[]) => unknown
}

/** How an application runs one fire of a leased method: never rejects. */
export type FireLeased = (method: LeasedMethod, instance: object, args: unknown[]) => Promise<unknown>

// Weakly, so a closed application's instances (and pools) go with it.
const bindings = new WeakMap<object, FireLeased>()

// Warned once per method: called outside any started module.
const unbound = new WeakSet<LeasedMethod>()

/** Binds `instance` to the application that runs its leased methods. */
export function bindInstance(instance: object, fire: FireLeased): void {
  bindings.set(instance, fire)
}

/** Unbinds `instance`, if `fire`'s application bound it. */
export function unbindInstance(instance: object, fire: FireLeased): void {
  if (bindings.get(instance) === fire) bindings.delete(instance)
}

const OPTION_KEYS = new Set(['leaseMs', 'catchUp'])

function checkLeasedOptions(options: unknown): LeasedOptions {
  if (options === undefined) return {}
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(`pg-cron-lease: @Leased() options must be an object, got ${shown(options, 1)}`)
  }
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) {
      throw new TypeError(`pg-cron-lease: @Leased() has no option ${JSON.stringify(key)} (it takes leaseMs, catchUp)`)
    }
  }
  const { leaseMs, catchUp } = options as LeasedOptions
  if (leaseMs !== undefined && !(Number.isInteger(leaseMs) && leaseMs >= 1 && leaseMs <= MAX_LEASE_MS)) {
    throw new TypeError(
      `pg-cron-lease: @Leased() leaseMs must be a whole number of ms from 1 to ${MAX_LEASE_MS}, got ${shown(leaseMs, 1)}`,
    )
  }
  if (catchUp !== undefined) {
    const withinMs = (catchUp as { withinMs?: unknown } | null)?.withinMs
    if (typeof withinMs !== 'number' || !Number.isFinite(withinMs) || withinMs <= 0) {
      throw new TypeError(
        `pg-cron-lease: @Leased() catchUp must be { withinMs } with a positive number of ms, got ${shown(catchUp, 1)}`,
      )
    }
  }
  return Object.freeze({ ...(options as LeasedOptions) })
}

/**
 * Makes a scheduled method a singleton across replicas: each fire claims its occurrence first, and
 * only the winner runs the body. Beside `@Cron`, `@Interval` or `@Timeout`; the job name is the
 * scheduler's name, else `ClassName.methodName`; the `LeaseContext` comes as the last argument.
 * A call never rejects: errors go to the module's logger.
 *
 * @example
 * \@Cron('0 * * * *', { name: 'report:hourly' })
 * \@Leased()
 * async send(ctx: LeaseContext) { await sendReport({ signal: ctx.signal }) }
 */
export function Leased(options?: LeasedOptions): MethodDecorator {
  const checked = checkLeasedOptions(options)
  return (target, key, descriptor) => {
    const original = descriptor.value as unknown
    const owner = typeof target === 'function' ? target : target.constructor
    if (typeof original !== 'function') {
      throw new TypeError(`pg-cron-lease: @Leased() goes on a method; ${owner.name}.${String(key)} is not one`)
    }
    if (Reflect.getMetadata?.(LEASED_METADATA, original) !== undefined) {
      throw new TypeError(`pg-cron-lease: @Leased() is on ${owner.name}.${String(key)} twice`)
    }
    const method: LeasedMethod = Object.freeze({
      className: owner.name,
      methodName: String(key),
      options: checked,
      original: original as LeasedMethod['original'],
    })
    const wrapper = function (this: object, ...args: unknown[]): Promise<unknown> {
      const fire = bindings.get(this)
      if (fire !== undefined) return fire(method, this, args)
      if (!unbound.has(method)) {
        unbound.add(method)
        new Logger('PgCronLease').error(
          `${method.className}.${method.methodName} fired, but its instance belongs to no application that imports ` +
            'PgCronLeaseModule (or that application has closed): not run',
        )
      }
      return Promise.resolve(undefined)
    }
    Object.defineProperty(wrapper, 'name', { value: original.name })
    // Decorators applied before this one set metadata on the original: move it to the wrapper.
    for (const name of Reflect.getMetadataKeys?.(original) ?? []) {
      Reflect.defineMetadata(name, Reflect.getMetadata(name, original), wrapper)
    }
    Reflect.defineMetadata(LEASED_METADATA, method, wrapper)
    descriptor.value = wrapper as typeof descriptor.value
    return descriptor
  }
}

/** The leased method behind `fn`, if `@Leased()` made it. */
export function leasedMethod(fn: unknown): LeasedMethod | undefined {
  return typeof fn === 'function' ? Reflect.getMetadata?.(LEASED_METADATA, fn) : undefined
}
