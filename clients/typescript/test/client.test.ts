// Against a live `rcll serve` that tests/test_typescript_client.py starts: RCLL_URL, a writer and a
// read-only token scoped to ts-*, the banks RCLL_BANK and RCLL_OTHER_BANK (in scope) and
// RCLL_BEYOND_BANK (it exists, outside the scope).
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ErrorCodes, Rcll, RcllError, type RecallRequest } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through tests/test_typescript_client.py`);
  return value;
}

const url = env("RCLL_URL");
const bank = env("RCLL_BANK");
const other = env("RCLL_OTHER_BANK");
const beyond = env("RCLL_BEYOND_BANK");
const writer = new Rcll({ baseUrl: url, token: env("RCLL_TOKEN") });
const reader = new Rcll({ baseUrl: url + "/", token: env("RCLL_READER_TOKEN") });

/** The RcllError a call rejects with (fails when it resolves or throws anything else). */
async function refusal(call: Promise<unknown>): Promise<RcllError> {
  try {
    await call;
  } catch (e) {
    assert.ok(e instanceof RcllError, `expected an RcllError, got ${String(e)}`);
    return e;
  }
  assert.fail("the call was expected to be refused");
}

const DEPLOY = "We deploy the billing service with Argo CD since March.";
const OUTAGE = "The Friday outage came from an expired TLS certificate on the load balancer.";

describe("retain and recall", () => {
  it("retains a text and recalls it with its filters", async () => {
    const kept = await writer.retain({ bank, content: DEPLOY, room: "deployment", thread: "t-1",
                                       tags: ["ops", "billing"], layer: "L1", source: "ts-test",
                                       occurred_at: "2026-03-02T10:00:00Z", metadata: { from: "typescript" } });
    assert.equal(kept.created, true);
    assert.ok(kept.unit_ids.length >= 1 && kept.document_id > 0);
    await writer.retain({ bank, content: OUTAGE, room: "incidents", thread: "t-2", tags: ["ops"] });

    const found = await writer.recall({ bank, query: "how do we deploy billing?" });
    assert.ok(found.facts.length >= 1);
    assert.match(found.facts[0]?.text ?? "", /Argo CD/);
    assert.equal(found.facts[0]?.author, "ts-writer");     // the token's agent, never the body's

    // Every filter narrows to what it names: the outage lives in another room, thread and tag set.
    const narrowed: RecallRequest[] = [
      { bank, query: "what happened?", rooms: ["deployment"] },
      { bank, query: "what happened?", thread: "t-1" },
      { bank, query: "what happened?", tags_all: ["ops", "billing"] },
      { bank, query: "what happened?", tags_any: ["billing"], layers: ["L1"] },
      { bank, query: "what happened?", halls: null, authors: ["ts-writer"], mine: true, rooms: ["deployment"] },
    ];
    for (const request of narrowed) {
      const texts = (await writer.recall(request)).facts.map((f) => f.text);
      assert.ok(texts.length >= 1 && texts.every((t) => !t.includes("TLS")), JSON.stringify({ request, texts }));
    }
    const none = await writer.recall({ bank, query: "deploy", rooms: ["nowhere"] });
    assert.deepEqual(none.facts, []);
  });

  it("takes every field of the schema's recall body", async () => {
    // Required<>: a field the server adds fails this file's compilation until the test names it.
    const every: Required<RecallRequest> = {
      bank, query: "TLS certificate outage", rooms: ["incidents", "deployment"], authors: ["ts-writer"], mine: true,
      include_unattributed: true, halls: null, layers: ["L0", "L1", "L2"], tags_any: ["ops"], tags_all: ["ops"],
      thread: "t-2", as_of: new Date().toISOString(), include_self_declared: false,
      time_from: "2026-01-01T00:00:00Z", time_to: "2027-01-01T00:00:00Z", reference_time: "2026-06-01T00:00:00Z",
      weights: { dense: 1, lexical: 2 }, channel_limit: 50, limit: 5, rerank_depth: 10, context_depth: 2,
      budget: 200, deadline_ms: 30_000, explain: true,
    };
    const out = await writer.recall(every);
    assert.deepEqual(out.facts.map((f) => f.text), [OUTAGE]);
    assert.equal(out.deadline_ms, 30_000);
    assert.deepEqual([out.ranks?.length, out.budget], [1, 200], "explain adds the ranks and the budget");
    assert.ok(out.tokens <= 200 && out.elapsed_ms > 0 && out.timings_ms.rerank >= 0);
  });

  it("a read-only token recalls but may not retain", async () => {
    const found = await reader.recall({ bank, query: "deploy" });
    assert.ok(found.facts.length >= 1);
    const e = await refusal(reader.retain({ bank, content: "not mine to write" }));
    assert.equal(e.status, 403);
    assert.equal(e.code, "RC006");
    assert.equal(e.kind, "not_permitted");
  });
});

describe("rooms, tags, stats, health", () => {
  it("lists rooms and tags, the roster of authors among them", async () => {
    const rooms = await writer.rooms({ bank });
    const names = rooms.rooms.map((r) => r.name);
    assert.ok(names.includes("deployment") && names.includes("incidents"), names.join());
    const some = await writer.rooms({ bank, q: "dep*" });
    assert.deepEqual(some.rooms.map((r) => r.name), ["deployment"]);
    const authors = await writer.tags({ bank, q: "author:*" });
    assert.deepEqual(authors.tags.map((t) => t.tag), ["author:ts-writer"]);
    const { tags } = await writer.tags({ bank });
    assert.ok(tags.some((t) => t.tag === "ops" && t.unit_count >= 2));
  });

  it("counts a bank by author", async () => {
    const stats = await writer.stats({ bank });
    assert.equal(stats.bank, bank);
    assert.ok((stats.author["ts-writer"] ?? 0) >= 2);
  });

  it("health says more to a caller with a token than to one without", async () => {
    assert.deepEqual(await new Rcll(url).health(), { status: "alive" });
    const health = await writer.health();
    assert.equal(health.status, "ok");
    assert.equal(typeof health.rcll, "string");
    assert.equal(typeof health.upkeep?.every_seconds, "number");
  });
});

describe("keyed state with compare-and-set", () => {
  it("puts, reads, conflicts on a stale version and reads a past one", async () => {
    const first = await writer.putState({ bank, room: "deployment", key: "release", value: { tag: "v1" },
                                          expected_version: 0 });
    assert.deepEqual(first, { room: "deployment", key: "release", version: 1 });
    const second = await writer.putState({ bank, room: "deployment", key: "release", value: { tag: "v2" },
                                           expected_version: 1 });
    assert.equal(second.version, 2);
    const stale = await refusal(writer.putState({ bank, room: "deployment", key: "release", value: { tag: "v3" },
                                                  expected_version: 1 }));
    assert.equal(stale.status, 409);
    assert.equal(stale.code, "RC005");
    assert.equal(stale.field, "expected_version");
    assert.ok(stale.hint, "a conflict says how to recover");
    const now = await writer.getState({ bank, room: "deployment", key: "release" });
    assert.deepEqual([now.value, now.version], [{ tag: "v2" }, 2]);
    assert.equal(now.provenance["who"], "ts-writer");
    const then = await writer.getState({ bank, room: "deployment", key: "release", version: 1 });
    assert.deepEqual(then.value, { tag: "v1" });
    const missing = await refusal(writer.getState({ bank, room: "deployment", key: "never" }));
    assert.deepEqual([missing.status, missing.code, missing.field], [404, "RC003", "key"]);
  });
});

describe("export and import", () => {
  it("exports a bank as NDJSON and imports it back, skipping what is there", async () => {
    const text = await writer.exportBank(bank);
    const lines = text.trimEnd().split("\n").map((l) => JSON.parse(l));
    assert.equal(lines[0].format, "rcll-export-stream");
    assert.ok(lines.some((l) => l.table === "memory_units"));
    const exists = await refusal(writer.importBank(text));
    assert.deepEqual([exists.status, exists.code, exists.field], [409, "RC004", "bank"]);
    const summary = await writer.importBank(new TextEncoder().encode(text), { on_conflict: "skip" });
    assert.deepEqual([summary.bank, summary.fresh], [bank, false]);
    // A stream in, as a stream out: the export's bytes piped straight back.
    const streamed = await writer.importBank(await writer.exportStream(bank), { on_conflict: "skip" });
    assert.equal(streamed.bank, bank);
    const bad = await refusal(writer.importBank("not json\n"));
    assert.deepEqual([bad.status, bad.code, bad.kind], [422, "RC008", "invalid_stream"]);
  });
});

describe("errors are typed values", () => {
  it("a request the schema refuses names the field and lists every problem", async () => {
    const e = await refusal(writer.retain({ bank, content: "ok", layer: "L9" }));
    assert.deepEqual([e.status, e.code, e.kind, e.field], [422, "RC001", "invalid_input", "layer"]);
    assert.ok(e.hint && e.message);
    const many = await refusal(writer.recall({ bank: "", query: "" }));
    assert.ok(many.errors.length >= 2, JSON.stringify(many.errors));
    assert.deepEqual(Object.keys(many.toJSON()), ["code", "field", "error", "hint"]);
  });

  it("a bank outside the token's scope answers exactly as one that does not exist", async () => {
    const beyondIt = await refusal(writer.recall({ bank: beyond, query: "anything" }));
    const nowhere = await refusal(writer.recall({ bank: "no-such-bank", query: "anything" }));
    assert.deepEqual([beyondIt.status, beyondIt.code, beyondIt.field], [404, "RC002", "bank"]);
    assert.equal(beyondIt.message.replace(beyond, "?"), nowhere.message.replace("no-such-bank", "?"));
    await writer.recall({ bank: other, query: "anything" });     // in scope, empty: answered
  });

  it("a missing or wrong token is unauthenticated", async () => {
    const none = await refusal(new Rcll(url).recall({ bank, query: "x" }));
    assert.deepEqual([none.status, none.code, none.field], [401, "RC009", "authorization"]);
    const wrong = await refusal(new Rcll({ baseUrl: url, token: "not-a-token-at-all" }).stats({ bank }));
    assert.equal(wrong.code, "RC009");
  });

  it("a server out of reach is RC010 with status 0; the caller's own abort stays an abort", async () => {
    const away = await refusal(new Rcll("http://127.0.0.1:9").health());
    assert.deepEqual([away.status, away.code, away.kind], [0, "RC010", "unavailable"]);
    assert.ok(away.cause !== undefined);
    await assert.rejects(writer.recall({ bank, query: "deploy" }, { signal: AbortSignal.abort() }),
                         (e: Error) => e.name === "AbortError");
  });

  it("an answer that is not RCLL's keeps its status and has no code", async () => {
    const proxy: typeof fetch = async () => new Response("<html>Bad gateway</html>", { status: 502 });
    const e = await refusal(new Rcll({ baseUrl: url, fetch: proxy }).health());
    assert.deepEqual([e.status, e.code, e.kind, e.field], [502, null, null, null]);
    assert.match(e.message, /502/);
  });

  it("every code of docs/errors.md has its kind", () => {
    assert.equal(Object.keys(ErrorCodes).length, 10);
    assert.equal(ErrorCodes.RC007, "too_broad");
  });
});
