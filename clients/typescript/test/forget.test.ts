// Forget, correct, history and retention against the live `rcll serve` of tests/test_typescript_client.py:
// RCLL_FORGET_BANK (holds only what this file writes) and RCLL_DROP_BANK (dropped here).
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";

import { Rcll, RcllError } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through tests/test_typescript_client.py`);
  return value;
}

const url = env("RCLL_URL");
const bank = env("RCLL_FORGET_BANK");
const drop = env("RCLL_DROP_BANK");
const writer = new Rcll({ baseUrl: url, token: env("RCLL_TOKEN") });
const reader = new Rcll({ baseUrl: url, token: env("RCLL_READER_TOKEN") });

async function refusal(call: Promise<unknown>): Promise<RcllError> {
  try {
    await call;
  } catch (e) {
    assert.ok(e instanceof RcllError, `expected an RcllError, got ${String(e)}`);
    return e;
  }
  assert.fail("the call was expected to be refused");
}

async function texts(query: string): Promise<string[]> {
  return (await writer.recall({ bank, query })).facts.map((f) => f.text);
}

const SECRET = "The vault password is qxsecretq-4711.";

describe("forget", () => {
  before(async () => {
    // Memories that stay: a forget matching every memory of the bank is refused without `everything`.
    await writer.retain({ bank, content: "Carol books the meeting rooms.", thread: "kept" });
    await writer.retain({ bank, content: "Dave orders the printer paper.", thread: "kept" });
  });

  it("is a dry run unless dry_run is false, by selector and by thread", async () => {
    await writer.retain({ bank, content: SECRET, thread: "oops/1", room: "security" });
    const dry = await writer.forget({ bank, thread: "oops/1" });
    assert.deepEqual([dry.dry_run, dry.counts["units"]], [true, 1]);
    assert.ok((await texts("vault password")).includes(SECRET), "a dry run changes nothing");
    const dryThread = await writer.forgetThread("oops/1", { bank });
    assert.deepEqual(dryThread.counts, dry.counts);

    const gone = await writer.forgetThread("oops/1", { bank, dry_run: false, reason: "stored by mistake" });
    assert.deepEqual([gone.dry_run, gone.counts], [false, dry.counts]);
    assert.ok(!(await texts("vault password")).includes(SECRET));
  });

  it("forgets one unit, one document; gone is gone", async () => {
    const one = await writer.retain({ bank, content: "Alice keeps the kitchen tidy." });
    const two = await writer.retain({ bank, content: "Bob waters the plants on Fridays." });
    const unit = one.unit_ids[0] ?? assert.fail("retain returned no unit");
    assert.equal((await writer.forgetUnit(unit, { bank })).dry_run, true);
    assert.equal((await writer.forgetUnit(unit, { bank, dry_run: false })).counts["units"], 1);
    const doc = await writer.forgetDocument(two.document_id, { bank, dry_run: false });
    assert.equal(doc.counts["documents"], 1);
    const again = await refusal(writer.forgetUnit(unit, { bank, dry_run: false }));
    assert.deepEqual([again.status, again.code, again.field], [404, "RC003", "unit_ids"]);
    const left = await texts("who does what at the office");
    assert.ok(!left.some((t) => t.includes("Alice") || t.includes("Bob")), left.join(" | "));
  });

  it("an unscoped forget is refused as too broad and changes nothing", async () => {
    const none = await refusal(writer.forget({ bank, dry_run: false }));
    assert.deepEqual([none.status, none.code, none.kind], [422, "RC007", "too_broad"]);
    assert.ok(none.field && none.hint);
    const all = await refusal(writer.forget({ bank, thread: "kept", dry_run: false }));   // every memory left
    assert.equal(all.code, "RC007");
    const everything = await writer.forget({ bank, everything: bank });
    assert.equal(everything.dry_run, true);
    assert.ok((everything.counts["units"] ?? 0) >= 2);
  });

  it("needs the forget verb", async () => {
    const e = await refusal(reader.forget({ bank, thread: "kept" }));
    assert.deepEqual([e.status, e.code], [403, "RC006"]);
  });

  it("forgets keyed state, one key with every version", async () => {
    const key = { bank, room: "deployment", key: "freeze" };
    await writer.putState({ ...key, value: 1, expected_version: 0 });
    await writer.putState({ ...key, value: 2, expected_version: 1 });
    assert.equal((await writer.forgetState(key)).dry_run, true);
    await writer.forgetState({ ...key, dry_run: false });
    const e = await refusal(writer.getState(key));
    assert.deepEqual([e.status, e.code], [404, "RC003"]);
  });

  it("drops a whole bank only when confirm repeats its name", async () => {
    await writer.retain({ bank: drop, content: "A memory of a bank about to go." });
    const wrong = await refusal(writer.dropBank(drop, { confirm: bank, dry_run: false }));
    assert.equal(wrong.code, "RC007");
    assert.equal((await writer.dropBank(drop, { confirm: drop })).dry_run, true);
    await writer.recall({ bank: drop, query: "memory" });             // still there after the dry run
    const dropped = await writer.dropBank(drop, { confirm: drop, dry_run: false, reason: "test" });
    assert.equal(dropped.dry_run, false);
    const e = await refusal(writer.recall({ bank: drop, query: "memory" }));
    assert.deepEqual([e.status, e.code], [404, "RC002"]);
  });
});

describe("correct and history", () => {
  it("replaces a unit's text with a reason and keeps the old one in its history", async () => {
    const kept = await writer.retain({ bank, content: "The standup is at 9:30 on weekdays.", room: "rituals" });
    const unit = kept.unit_ids[0] ?? assert.fail("retain returned no unit");
    const corrected = await writer.correct(unit, { bank, text: "The standup is at 10:00 on weekdays.",
                                                   reason: "moved in October" });
    assert.equal(corrected.unit_id, unit);
    assert.deepEqual(corrected.versions.map((v) => [v.text, v.current]),
                     [["The standup is at 10:00 on weekdays.", true], ["The standup is at 9:30 on weekdays.", false]]);
    const history = await writer.history(unit, { bank });
    assert.equal(history.versions[1]?.reason, "moved in October");
    assert.ok((await texts("when is the standup?")).includes("The standup is at 10:00 on weekdays."));
    const missing = await refusal(writer.history(987_654_321, { bank }));
    assert.deepEqual([missing.status, missing.code, missing.field], [404, "RC003", "unit_id"]);
    const bad = await refusal(writer.correct(unit, { bank, text: "", reason: "x" }));
    assert.deepEqual([bad.status, bad.code, bad.field], [422, "RC001", "text"]);
  });
});

describe("retention", () => {
  it("sets, lists and removes a policy; retain takes a ttl", async () => {
    await writer.retain({ bank, content: "Scratch notes from the incident call.", room: "scratch", ttl: "PT1H" });
    await writer.retain({ bank, content: "Expiring link to the dashboard.", room: "scratch",
                          expires_at: new Date(Date.now() + 86_400_000).toISOString() });
    const set = await writer.putRetention({ bank, room: "scratch", keep: "P90D" });
    assert.equal(set.room, "scratch");
    assert.equal(typeof set.changed, "number");
    const { policies } = await writer.retention({ bank });
    const policy = policies.find((p) => p.room === "scratch") ?? assert.fail(JSON.stringify(policies));
    assert.deepEqual([policy.keep, policy.keep_seconds], ["P90D", 90 * 86_400]);
    await writer.putRetention({ bank, room: "scratch", keep: null });
    assert.deepEqual((await writer.retention({ bank })).policies.filter((p) => p.room === "scratch"), []);
    const bad = await refusal(writer.putRetention({ bank, keep: "ninety days" }));
    assert.deepEqual([bad.status, bad.code, bad.field], [422, "RC001", "keep"]);
  });
});
