/**
 * The documented argument rules, written independently of src/validate.ts, as the oracle the
 * fuzz tests compare the library against.
 */

/** True when the text has a UTF-16 surrogate half without its partner. */
export function hasLoneSurrogate(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) i++
      else return true
    } else if (c >= 0xdc00 && c <= 0xdfff) return true
  }
  return false
}

/** A non-empty string without NUL (the rule for jobName, and for a holder that is not the default). */
export function isNameText(value: unknown): value is string {
  return typeof value === 'string' && value !== '' && value.indexOf('\u0000') === -1
}

/** Nothing given: undefined, or null as the original package took it for options and a logger. */
export function isNone(value: unknown): value is null | undefined {
  return value === undefined || value === null
}

/** A holder that asks for the default (hostname:pid): none, or '' as the original package took it. */
export function asksForDefaultHolder(value: unknown): boolean {
  return isNone(value) || value === ''
}

/** Bytes of UTF-8 for well-formed text, counted code point by code point. */
export function utf8Bytes(text: string): number {
  let bytes = 0
  for (const char of text) {
    const c = char.codePointAt(0) as number
    bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4
  }
  return bytes
}

/**
 * Names up to this many bytes of UTF-8 always fit the primary key's index (a btree entry holds
 * 2704 bytes); longer ones fit only if they compress, which the server decides.
 */
export const ALWAYS_FITS_BYTES = 2048

/** The rule for jobName: non-empty, no NUL, well-formed Unicode. */
export function isJobName(value: unknown): value is string {
  return isNameText(value) && !hasLoneSurrogate(value)
}

function isIdentifierPart(part: string): boolean {
  if (part.length === 0) return false
  for (let i = 0; i < part.length; i++) {
    const c = part[i] as string
    const letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c === '_'
    const digit = c >= '0' && c <= '9'
    if (!(letter || (i > 0 && (digit || c === '$')))) return false
  }
  return true
}

/**
 * The rule for a table: `name` or `schema.name`, each an ASCII identifier that may hold `$`; the
 * schema must not be one of Postgres's own (`pg_` prefix, e.g. the per-session pg_temp).
 */
export function isTableName(value: unknown): value is string {
  if (typeof value !== 'string') return false
  const parts = value.split('.')
  if (parts.length === 2 && (parts[0] as string).slice(0, 3) === 'pg_') return false
  return parts.length <= 2 && parts.every(isIdentifierPart)
}
