// SQL recall from Node.js: node-postgres runs rcll.recall with parameters, like any application would.
// Connection from the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER); prints {rows, notices}.
import pg from "pg";

const [query, bank] = process.argv.slice(2);
const client = new pg.Client();
const notices = [];
client.on("notice", (n) => notices.push(n.message));
await client.connect();
try {
  const { rows } = await client.query(
    "SELECT unit_id::text AS unit_id, rerank_score, rank_dense, rank_lexical FROM rcll.recall($1, rcll.recall_scope($2))",
    [query, bank],
  );
  process.stdout.write(JSON.stringify({ rows, notices }) + "\n");
} finally {
  await client.end();
}
