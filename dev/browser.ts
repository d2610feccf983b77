/**
 * A real headless Chromium for the browser tests: Debian's `chromium` (or CHROMIUM_PATH), driven
 * by playwright-core, which downloads no browser of its own. scripts/test.ts leaves the browser
 * suite out, saying so in one line, when none is found, except under CI=true, where it must run.
 */
import { existsSync } from 'node:fs'
import type { Browser } from 'playwright-core'

const PLACES = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome']

/** Where the browser is: CHROMIUM_PATH, else the first of the usual paths that exists. */
export function chromiumPath(): string | undefined {
  const given = process.env.CHROMIUM_PATH
  if (given !== undefined && given !== '') return given
  return PLACES.find((place) => existsSync(place))
}

export const HOW_TO_GET_ONE =
  'install one with `apt-get install -y chromium` (or set CHROMIUM_PATH), then run `node --import tsx scripts/test.ts --only browser`'

// Flags that work on a machine with no network beyond loopback, as root; playwright adds
// --headless and a fresh --user-data-dir of its own.
const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]

export async function launchBrowser(): Promise<Browser> {
  const executablePath = chromiumPath()
  if (executablePath === undefined) throw new Error(`no Chromium found: ${HOW_TO_GET_ONE}`)
  const { chromium } = await import('playwright-core')
  return chromium.launch({ executablePath, args: FLAGS, headless: true })
}
