-- Graph channel: activation spread from the entities the query names, over unit_entities and links.

CREATE OR REPLACE FUNCTION rcll._query_ngrams(query text, max_words integer DEFAULT 3)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Lower-cased word n-grams (1..max_words) of the query, possessives dropped: the spellings an
    -- entity alias can match exactly.
    WITH w AS (
        SELECT array_remove(regexp_split_to_array(
                   regexp_replace(lower(query), '''s\M', '', 'g'), '[^[:alnum:]_.''-]+'), '') AS words
    )
    SELECT coalesce(array_agg(DISTINCT array_to_string(w.words[i:i + len - 1], ' ')), '{}')
    FROM w, generate_series(1, coalesce(cardinality(w.words), 0)) AS i, generate_series(1, max_words) AS len
    WHERE i + len - 1 <= cardinality(w.words)
$$;
COMMENT ON FUNCTION rcll._query_ngrams(text, integer) IS 'Internal: lower-cased word n-grams of a query (possessives dropped), for matching entity names and aliases.';

CREATE OR REPLACE FUNCTION rcll._query_entities(
    query          text,
    bank_id        integer,
    min_similarity real DEFAULT 0.6,
    max_entities   integer DEFAULT 16)
RETURNS TABLE (entity_id bigint, name text, matched text, similarity real)
LANGUAGE plpgsql STABLE
-- The server's usual plan cache mode, not the channels' force_custom_plan (which it would inherit
-- from rcll.channel_graph): its statements' plans do not turn on the query's n-grams, and planned
-- on every recall they cost more than they took to run (docs/scaling.md).
SET plan_cache_mode = auto
AS $$
#variable_conflict use_column
DECLARE
    bk  integer := _query_entities.bank_id;
    cfg regconfig;
    grams text[];
BEGIN
    SELECT x.text_search_config INTO cfg FROM rcll.banks x WHERE x.bank_id = bk;
    -- Single stop words ("the", "we") never name an entity; short single tokens only match exactly.
    grams := ARRAY(SELECT g FROM unnest(rcll._query_ngrams(coalesce(_query_entities.query, ''), 3)) g
                   WHERE g LIKE '% %' OR length(to_tsvector(cfg, g)) > 0);
    IF cardinality(grams) = 0 THEN
        RETURN;
    END IF;
    -- Ties go by the spelling matched and the name, not by id: ids keep the order entities were
    -- first named in, which a forgotten mention changes (docs/forgetting.md).
    RETURN QUERY
    SELECT m.entity_id, e.name, m.matched, m.sim
    FROM (
        SELECT DISTINCT ON (c.entity_id) c.entity_id, c.matched, c.sim
        FROM (
            SELECT a.entity_id, a.alias AS matched, 1.0::real AS sim
            FROM rcll.entity_aliases a WHERE a.bank_id = bk AND a.alias = ANY (grams)
            UNION ALL
            SELECT x.entity_id, lower(x.name), 1.0::real
            FROM rcll.entities x WHERE x.bank_id = bk AND lower(x.name) = ANY (grams)
        ) c
        ORDER BY c.entity_id, c.sim DESC, c.matched
    ) m
    JOIN rcll.entities e ON e.bank_id = bk AND e.entity_id = m.entity_id
    ORDER BY m.sim DESC, m.matched, e.name, m.entity_id
    LIMIT _query_entities.max_entities;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Nothing named exactly: trigram similarity of an alias (every spelling, the canonical name
    -- included) to a one- or two-word n-gram of the query. One GIN probe per n-gram, so only
    -- when the exact match found nothing.
    RETURN QUERY
    SELECT m.entity_id, e.name, m.matched, m.sim
    FROM (
        SELECT DISTINCT ON (a.entity_id) a.entity_id, a.alias AS matched, public.similarity(a.alias, g.g) AS sim
        FROM unnest(grams) g(g)
        JOIN rcll.entity_aliases a ON a.bank_id = bk AND a.alias OPERATOR(public.%) g.g
        WHERE length(g.g) >= 4 AND g.g NOT LIKE '% % %'
          AND public.similarity(a.alias, g.g) >= _query_entities.min_similarity
        ORDER BY a.entity_id, 3 DESC, a.alias
    ) m
    JOIN rcll.entities e ON e.bank_id = bk AND e.entity_id = m.entity_id
    ORDER BY m.sim DESC, m.matched, e.name, m.entity_id
    LIMIT _query_entities.max_entities;
END
$$;
COMMENT ON FUNCTION rcll._query_entities(text, integer, real, integer)
    IS 'Internal: rcll.query_entities for a resolved bank id (the graph channel''s seeds).';

CREATE OR REPLACE FUNCTION rcll.query_entities(
    query          text,
    bank           text,
    min_similarity real DEFAULT 0.6,
    max_entities   integer DEFAULT 16)
RETURNS TABLE (entity_id bigint, name text, matched text, similarity real)
LANGUAGE sql STABLE
AS $$
    SELECT * FROM rcll._query_entities(query_entities.query, rcll._bank_id(query_entities.bank),
                                       query_entities.min_similarity, query_entities.max_entities)
$$;
COMMENT ON FUNCTION rcll.query_entities(text, text, real, integer)
    IS 'Entities a query names: exact matches of its word n-grams (up to three words) against entity names and aliases; when there are none, trigram matches of aliases to its one- and two-word n-grams with similarity >= min_similarity. The graph channel''s seeds.';

CREATE OR REPLACE FUNCTION rcll._keyless_link(role text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): inlined into the graph channel's queries.
AS $$
    -- The roles chunk-mode retain gives its keyless links (sql/functions/205-keyless-entities.sql).
    -- Those are the entity channel's: spreading activation from a speaker over every one of their
    -- turns (a hub, half a conversation) adds only the newest of them - on LoCoMo the fused pool
    -- with the graph walking them held R@50 0.907 / nDCG@5 0.546 against 0.909 / 0.550 without.
    SELECT coalesce(role IN ('speaker', 'name'), false)
$$;
COMMENT ON FUNCTION rcll._keyless_link(text) IS 'Internal: whether a unit_entities role is a keyless link written by chunk-mode retain (speaker, name): read by the entity channel, not walked by the graph channel.';

CREATE OR REPLACE FUNCTION rcll.channel_graph(
    query   text,
    scope   rcll.recall_scope,
    "limit" integer DEFAULT (rcll.recall_defaults()).channel_limit,
    hops    integer DEFAULT 2,
    decay   double precision DEFAULT 0.5,
    fanout  integer DEFAULT 100)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    lim  integer := greatest(coalesce(channel_graph."limit", (rcll.recall_defaults()).channel_limit), 0);
    cap  integer := greatest(coalesce(channel_graph.fanout, 100), 1);
    ents bigint[];            -- entity frontier
    eact double precision[];
    seen_ents bigint[];
    units bigint[];           -- unit frontier
    uact double precision[];
    all_units bigint[] := '{}';
    all_act double precision[] := '{}';
    hop integer := 1;
    -- On a Citus cluster every statement must name its bank to reach its shard (rcll._bank_pinned);
    -- on one node this is a constant false and the bank tests below fold away (with them, the
    -- one-node plans of the hops were slower: docs/scaling.md, "Citus").
    pinned boolean := rcll._bank_pinned();
BEGIN
    IF lim = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(s.entity_id), array_agg(s.similarity::double precision) INTO ents, eact
    FROM rcll._query_entities(channel_graph.query, (scope).bank_id) s;
    IF ents IS NULL THEN
        RETURN;
    END IF;
    seen_ents := ents;

    -- Plain joins over arrays, one statement per hop: no recursive path enumeration (which
    -- explodes on hubs), no temp tables (a hot standby cannot create them), no graph extension.
    -- Each hop is capped: at most `fanout` units per entity (the newest) and a frontier of at
    -- most `fanout` units, so a hub entity costs as much as an ordinary one.
    WHILE hop <= greatest(coalesce(channel_graph.hops, 2), 1) LOOP
        -- Entities -> the units that mention them (filtered: activation never flows through
        -- units the recall may not read). A unit naming several active entities adds them up.
        SELECT array_agg(x.unit_id ORDER BY x.act DESC, x.unit_id DESC), array_agg(x.act ORDER BY x.act DESC, x.unit_id DESC)
        INTO units, uact
        FROM (
          SELECT a.unit_id, a.act FROM (
            -- Sums in activation order: a float sum depends on its order, which ids must not decide.
            SELECT m.unit_id, sum(m.act ORDER BY m.act) AS act FROM (
                SELECT s.unit_id, e.act * power(channel_graph.decay, hop - 1) AS act
                FROM unnest(ents, eact) AS e(entity_id, act)
                CROSS JOIN LATERAL (
                    SELECT ue.unit_id FROM rcll.unit_entities ue
                    JOIN rcll.memory_units u ON u.unit_id = ue.unit_id AND (NOT pinned OR u.bank_id = ue.bank_id)
                    WHERE ue.entity_id = e.entity_id AND NOT rcll._keyless_link(ue.role)
                      AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
                    ORDER BY ue.unit_id DESC LIMIT cap) s
                UNION ALL
                -- Units -> linked units (both directions), weighted by the link.
                SELECT l.other, f.act * l.weight * channel_graph.decay
                FROM unnest(units, uact) AS f(unit_id, act)
                CROSS JOIN LATERAL (
                    SELECT k.to_unit AS other, k.weight FROM rcll.links k WHERE k.from_unit = f.unit_id AND (NOT pinned OR k.bank_id = (scope).bank_id)
                    UNION ALL
                    SELECT k.from_unit, k.weight FROM rcll.links k WHERE k.to_unit = f.unit_id AND (NOT pinned OR k.bank_id = (scope).bank_id)) l
                JOIN rcll.memory_units u ON u.unit_id = l.other AND (NOT pinned OR u.bank_id = (scope).bank_id)
                WHERE hop > 1
                  AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
            ) m
            GROUP BY m.unit_id
            -- The units reached before are dropped after the sums, above this fence (OFFSET 0):
            -- below it the planner pushed the test into both link scans and estimated it there
            -- element by element against the link columns' statistics: more planning per hop, once
            -- all_units holds a few hundred units, than the hop took to run (docs/scaling.md).
            -- Same rows: a unit's sum is dropped whole either way.
            OFFSET 0) a
          WHERE a.unit_id <> ALL (all_units)
          ORDER BY a.act DESC, a.unit_id DESC
          LIMIT cap * 4) x;
        EXIT WHEN units IS NULL;
        all_units := all_units || units;
        all_act := all_act || uact;
        hop := hop + 1;
        EXIT WHEN hop > greatest(coalesce(channel_graph.hops, 2), 1);

        units := units[1:cap];
        uact := uact[1:cap];
        -- Units -> the other entities they mention, each entity's activation split over the
        -- frontier units that reach it (a hub reached from many units is not amplified).
        -- (Ties by name, not by id, as in rcll._query_entities.)
        SELECT array_agg(y.entity_id ORDER BY y.act DESC, y.name, y.entity_id), array_agg(y.act ORDER BY y.act DESC, y.name, y.entity_id)
        INTO ents, eact
        FROM (
            SELECT ue.entity_id, e.name, sum(f.act ORDER BY f.act) / sqrt(count(*)) AS act
            FROM unnest(units, uact) AS f(unit_id, act)
            JOIN rcll.unit_entities ue ON ue.unit_id = f.unit_id AND (NOT pinned OR ue.bank_id = (scope).bank_id)
            JOIN rcll.entities e ON e.entity_id = ue.entity_id AND (NOT pinned OR e.bank_id = ue.bank_id)
            WHERE ue.entity_id <> ALL (seen_ents) AND NOT rcll._keyless_link(ue.role)
            GROUP BY ue.entity_id, e.name
            ORDER BY act DESC, e.name, ue.entity_id
            LIMIT greatest(cap / 10, 8)) y;
        ents := coalesce(ents, '{}');
        eact := coalesce(eact, '{}');
        seen_ents := seen_ents || ents;
    END LOOP;

    RETURN QUERY
    SELECT a.unit_id, a.act, (row_number() OVER (ORDER BY a.act DESC, a.unit_id DESC))::integer
    FROM unnest(all_units, all_act) AS a(unit_id, act)
    ORDER BY a.act DESC, a.unit_id DESC
    LIMIT lim;
END
$$;
COMMENT ON FUNCTION rcll.channel_graph(text, rcll.recall_scope, integer, integer, double precision, integer)
    IS 'Graph recall channel: activation spread from the entities the query names (rcll.query_entities) to the units mentioning them (the extractor''s links; keyless speaker/name links are the entity channel''s), then over links and shared entities for `hops` hops, multiplied by decay per hop and capped at fanout per entity and per frontier. Filtered before ranking by the scope (rcll.recall_scope): activation never passes through units the recall may not read. Plain SQL: runs on hot standbys. From psql: SELECT * FROM rcll.channel_graph(''where did Caroline move?'', rcll.recall_scope(''fleet'')).';
