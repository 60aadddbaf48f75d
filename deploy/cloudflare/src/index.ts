// A Worker in front of Hearth on Cloudflare Containers.
//
// Each shard is one Durable Object with one container. A conversation is
// routed by its id to the same shard every time, so its next turn finds its
// prefix in that server's cache. A shard with no request for `sleepAfter`
// is stopped (scale to zero) and started again by the next request to it.
import { Container, getContainer } from "@cloudflare/containers";

interface Env {
  HEARTH: DurableObjectNamespace<Hearth>;
  /** Optional: `wrangler secret put HEARTH_API_KEY` makes the server require it. */
  HEARTH_API_KEY?: string;
}

/** Containers sharing the traffic; keep at most `max_instances` in wrangler.jsonc. */
const SHARDS = 2;

/** How long a request may wait for a cold container's model to load. */
const READY_TIMEOUT_MS = 60_000;

export class Hearth extends Container<Env> {
  // The image's CMD serves /models/model.gguf on this port.
  defaultPort = 8080;
  // Stop the container after five minutes without a request. Streams in
  // flight count as activity, so a long answer is never cut.
  sleepAfter = "5m";
  // The port is open once any HTTP answer comes back; /health is the
  // cheapest route (503 while the model loads, then 200).
  pingEndpoint = "localhost/health";

  constructor(ctx: DurableObjectState<{}>, env: Env) {
    super(ctx, env);
    // Forward the key only when set: Hearth then requires it on /v1/*.
    if (env.HEARTH_API_KEY) {
      this.envVars = { HEARTH_API_KEY: env.HEARTH_API_KEY };
    }
  }
}

/** FNV-1a: a small, stable hash to pick a shard. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/**
 * The shard of a request: by `X-Conversation-Id` (or `X-Session-Id`) when
 * the client sends one, else by client address, so a client's turns still
 * tend to meet their cached prefix.
 */
function shardOf(request: Request): string {
  const key =
    request.headers.get("x-conversation-id") ??
    request.headers.get("x-session-id") ??
    request.headers.get("cf-connecting-ip") ??
    "";
  return `hearth-${fnv1a(key) % SHARDS}`;
}

/**
 * Wait until the shard's server has loaded its model: a container that was
 * asleep answers 503 on /health for the fraction of a second loading takes.
 */
async function waitReady(stub: DurableObjectStub<Hearth>, key?: string): Promise<boolean> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  // /health sits behind the API key when there is one.
  const headers: Record<string, string> = key ? { authorization: `Bearer ${key}` } : {};
  while (Date.now() < deadline) {
    const r = await stub.fetch("http://container/health", { headers });
    await r.body?.cancel();
    if (r.status === 200) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const stub = getContainer(env.HEARTH, shardOf(request));
    if (!(await waitReady(stub, env.HEARTH_API_KEY))) {
      return Response.json(
        {
          error: {
            message: "The model did not load in time; try again.",
            type: "server_error",
            param: null,
            code: null,
          },
        },
        { status: 503, headers: { "Retry-After": "5" } },
      );
    }
    return stub.fetch(request);
  },
} satisfies ExportedHandler<Env>;
