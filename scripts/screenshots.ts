/**
 * `npm run docs:screenshots`: the dashboard's pictures in docs/, from the demo's data. Runs the
 * demo's lease mode with `--dashboard`, then photographs the demo job's page (its lease, occurrence
 * strip, durations and runs) in light and in dark mode with headless Chromium
 * (dev/browser.ts finds it), and stops the demo, which removes its database.
 *
 *   npm run docs:screenshots
 */
import { spawn } from 'node:child_process'
import { launchBrowser } from '../dev/browser.ts'

const demo = spawn(
  process.execPath,
  ['--import', 'tsx', 'scripts/demo.ts', '--mode', 'lease', '--seconds', '20', '--dashboard', '--dashboard-port', '0'],
  { env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'inherit'] },
)
const exited = new Promise<void>((resolve) => demo.once('exit', () => resolve()))
let output = ''
const url = await new Promise<string>((resolve, reject) => {
  demo.stdout.on('data', (chunk) => {
    output += chunk
    const found = /Dashboard of the demo's table: (\S+)/.exec(output)?.[1]
    if (found) resolve(found)
  })
  demo.once('exit', () => reject(new Error(`the demo exited before serving the dashboard:\n${output}`)))
})

const browser = await launchBrowser()
try {
  for (const [colorScheme, path, file] of [
    ['light', '?job=demo%3Alease', 'docs/dashboard-light.png'],
    ['dark', '?job=demo%3Alease', 'docs/dashboard-dark.png'],
  ] as const) {
    const page = await browser.newPage({ colorScheme, viewport: { width: 1200, height: 760 }, timezoneId: 'UTC' })
    await page.goto(`${url}${path}`)
    await page.locator('#strip').waitFor()
    await page.screenshot({ path: file, fullPage: false })
    console.log(`wrote ${file}`)
    await page.close()
  }
} finally {
  await browser.close()
  demo.kill('SIGINT')
  await exited
}
