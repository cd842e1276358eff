import net from 'node:net';

/**
 * Rejects when something already listens on host:port. uWS listens with SO_REUSEPORT (that is how
 * the workers of one server share a port), so without this a second, unrelated Sluice started on
 * a taken port listened beside the first and the kernel split the traffic between two servers
 * with different data. A plain bind (no SO_REUSEPORT) fails on a port somebody listens on.
 */
export function ensurePortFree(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') reject(new Error(`port ${port} on ${host} is already in use: another server listens there`));
      else reject(err);
    });
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}
