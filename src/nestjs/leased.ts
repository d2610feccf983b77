/**
 * `@Leased()`: the method decorator. It replaces the method on its class's prototype at once, at
 * decoration time, with a wrapper that claims the lease before the body runs; the module binds each
 * instance to its application when it starts (`bindInstance`), and the wrapper asks for that
 * binding on every call.
 *
 * Why on the prototype, and at once: @nestjs/schedule binds the method it finds on the instance in
 * its own `onModuleInit`, and nothing orders that hook against ours. A wrapper in place before Nest
 * starts is the one that gets bound, whichever hook runs first; and two applications in one
 * process (each with its own pool and its own instance of the class) share the wrapper, while
 * each instance answers to its own application.
 */
import { inspect } from 'node:util'
import { Logger } from '@nestjs/common'
import { MAX_LEASE_MS } from '../presets.js'

/** The metadata key `@Leased()` sets on the wrapper, read by the module when it starts. */
export const LEASED_METADATA = 'pg-cron-lease:leased'

/**
 * Options of `@Leased()`. Every key is optional; an unknown key is a `TypeError` when the class is
 * defined.
 *
 * @example
 * const opts: LeasedOptions = { leaseMs: 45_000, catchUp: { withinMs: 6 * 3_600_000 } }
 */
export interface LeasedOptions {
  /**
   * The lease, in whole ms (1 to `MAX_LEASE_MS`). Default: from the schedule: 80% of the shortest
   * gap between the next 64 fires of a `@Cron` expression, `forInterval(ms)` for an `@Interval`,
   * and a minute for a `@Timeout`.
   */
  leaseMs?: number
  /**
   * Run a missed occurrence once when the application starts, if it fell due unclaimed no more
   * than `withinMs` ago (the core's `catchUp`). Default: off.
   */
  catchUp?: { withinMs: number }
}

/** What the decorator knows of one leased method, the same for every application in the process. */
export interface LeasedMethod {
  readonly className: string
  readonly methodName: string
  readonly options: Readonly<LeasedOptions>
  /** The method as written, called with the scheduler's arguments and the `LeaseContext` last. */
  readonly original: (...args: unknown[]) => unknown
}

/** How an application runs one fire of a leased method: never rejects. */
export type FireLeased = (method: LeasedMethod, instance: object, args: unknown[]) => Promise<unknown>

// Each instance is bound by the application that made it: weakly, so a closed application's
// instances (and their pools) go with it.
const bindings = new WeakMap<object, FireLeased>()

// Warned about once per method, not once per fire: a method called outside any started module.
const unbound = new WeakSet<LeasedMethod>()

/** Binds `instance` to the application that runs its leased methods. */
export function bindInstance(instance: object, fire: FireLeased): void {
  bindings.set(instance, fire)
}

export function unbindInstance(instance: object, fire: FireLeased): void {
  if (bindings.get(instance) === fire) bindings.delete(instance)
}

const OPTION_KEYS = new Set(['leaseMs', 'catchUp'])

function shown(value: unknown): string {
  const text = inspect(value, { depth: 1, breakLength: Number.POSITIVE_INFINITY })
  return text.length > 80 ? `${text.slice(0, 80)}…` : text
}

function checkLeasedOptions(options: unknown): LeasedOptions {
  if (options === undefined) return {}
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(`pg-cron-lease: @Leased() options must be an object, got ${shown(options)}`)
  }
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) {
      throw new TypeError(`pg-cron-lease: @Leased() has no option ${JSON.stringify(key)} (it takes leaseMs, catchUp)`)
    }
  }
  const { leaseMs, catchUp } = options as LeasedOptions
  if (leaseMs !== undefined && !(Number.isInteger(leaseMs) && leaseMs >= 1 && leaseMs <= MAX_LEASE_MS)) {
    throw new TypeError(
      `pg-cron-lease: @Leased() leaseMs must be a whole number of ms from 1 to ${MAX_LEASE_MS}, got ${shown(leaseMs)}`,
    )
  }
  if (catchUp !== undefined) {
    const withinMs = (catchUp as { withinMs?: unknown } | null)?.withinMs
    if (typeof withinMs !== 'number' || !Number.isFinite(withinMs) || withinMs <= 0) {
      throw new TypeError(
        `pg-cron-lease: @Leased() catchUp must be { withinMs } with a positive number of ms, got ${shown(catchUp)}`,
      )
    }
  }
  return Object.freeze({ ...(options as LeasedOptions) })
}

/**
 * Makes a scheduled method a singleton across replicas: each fire claims its occurrence in the
 * lease table first, and only the replica that wins runs the body. Put it beside `@Cron`,
 * `@Interval` or `@Timeout` (in either order), in a provider of an application that imports
 * `PgCronLeaseModule`.
 *
 * - The job name is the scheduler's name (`@Cron`'s `name`, or the name given to `@Interval` or
 *   `@Timeout`), else `ClassName.methodName`. An unnamed `@Cron` is registered under that name.
 * - A `@Cron` fire claims the slot of the schedule it fires for, however late, in the job's time
 *   zone; an `@Interval` fire claims the lease with the interval declared; a `@Timeout`, the lease.
 * - The method receives the tick's `LeaseContext` as an extra last argument: a scheduled method is
 *   passed nothing else, so for it the context is the first argument.
 * - A call never rejects: a claim or body error goes to the module's logger, and the outcome is
 *   recorded in the table. It resolves to the body's result where it ran, else `undefined`.
 * - `@Leased()` without a schedule decorator stops the application at start-up with an error.
 *
 * @example
 * \@Injectable()
 * class Reports {
 *   \@Cron('0 * * * *', { name: 'report:hourly' })
 *   \@Leased()
 *   async send(ctx: LeaseContext) {
 *     await sendReport({ signal: ctx.signal })
 *   }
 * }
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
    // The decorators applied before this one (written below it) set their metadata on the original
    // method: @nestjs/schedule finds its schedule on whatever method the instance has, so it moves
    // to the wrapper. The ones applied after it set theirs on the wrapper directly.
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
