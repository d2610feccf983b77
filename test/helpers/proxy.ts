/**
 * A TCP proxy on loopback that can lose replies: it forwards everything a client sends to the
 * server, and once a client has sent a message containing a marker (a piece of a statement's
 * text), it stops passing that connection's replies back. Used to lose the reply of a claim the
 * server has already committed, the way a dropped network link would.
 */
import net from 'node:net'

export interface LossyProxy {
  /** The port to connect to instead of the server's. */
  port: number
  /**
   * Arms the proxy: resolves once a client has sent bytes containing `marker`; those bytes still
   * reach the server, but from then on nothing the server sends on that connection reaches the client.
   */
  loseRepliesAfter(marker: string): Promise<void>
  /** Drops every connection through the proxy, as a broken link would (clients see a reset). */
  cut(): void
  /** Cuts every connection and stops listening. */
  close(): Promise<void>
}

/**
 * Starts a proxy on 127.0.0.1 in front of `127.0.0.1:targetPort`.
 *
 * @example
 * const proxy = await lossyProxy(5432)
 * const lost = proxy.loseRepliesAfter('ON CONFLICT')
 */
export async function lossyProxy(targetPort: number): Promise<LossyProxy> {
  const sockets = new Set<net.Socket>()
  let armed: { marker: Buffer; seen: () => void } | undefined

  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1')
    let losing = false
    // The marker may straddle two chunks, so the tail of the previous one is searched again.
    let tail = Buffer.alloc(0)
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => {})
    }
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
    client.on('data', (chunk) => {
      if (armed && !losing) {
        const window = Buffer.concat([tail, chunk])
        if (window.includes(armed.marker)) {
          losing = true
          const { seen } = armed
          armed = undefined
          seen()
        } else tail = window.subarray(Math.max(0, window.length - armed.marker.length))
      }
      upstream.write(chunk)
    })
    upstream.on('data', (chunk) => {
      if (!losing) client.write(chunk)
    })
  })
  server.on('error', () => {})
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  server.unref()
  const { port } = server.address() as net.AddressInfo

  const cut = () => {
    for (const socket of sockets) socket.destroy()
  }
  return {
    port,
    loseRepliesAfter(marker) {
      return new Promise<void>((seen) => {
        armed = { marker: Buffer.from(marker), seen }
      })
    },
    cut,
    close() {
      cut()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
