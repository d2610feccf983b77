/** Job names accepted before, so a name checked once is not checked again on every claim. */

// At most NAMES; past it the set starts again.
const NAMES = 1000
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
