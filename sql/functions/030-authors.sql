-- Authors: who wrote a unit, resolved by the server, never taken from the caller when the server knows.

CREATE OR REPLACE FUNCTION rcll._identity_server()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Checked by role existence first: pg_has_role fails for a role that does not exist.
    SELECT CASE WHEN to_regrole('rcll_identity_server') IS NULL THEN false
                ELSE pg_has_role(session_user, 'rcll_identity_server', 'MEMBER') END
$$;
COMMENT ON FUNCTION rcll._identity_server() IS 'Internal: true when the session''s role is a member of rcll_identity_server (superusers are), the role trusted to name the agent or person it authenticated.';

CREATE OR REPLACE FUNCTION rcll.current_agent()
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
-- Definer: any writer may learn its own identity without being able to read rcll.identities.
-- session_user (not current_user) is what it checks, and SECURITY DEFINER does not change it.
-- PL/pgSQL rather than SQL: it runs once per written row, and PL/pgSQL keeps its plans.
SECURITY DEFINER
-- On a Citus cluster it runs inside statements sent to a bank's worker and reads rcll.identities,
-- a reference table (its copy is on every node): allowed there, as rcll._bank_id (010-banks.sql).
SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    agent   text;
    claimed text;
BEGIN
    -- A role mapped in rcll.identities always writes as its agent.
    SELECT i.agent INTO agent FROM rcll.identities i WHERE i.role_name = session_user;
    IF agent IS NOT NULL THEN
        RETURN agent;
    END IF;
    -- Otherwise the RCLL server, which authenticated the caller, may set rcll.agent for the
    -- transaction - honoured only when the session's role is a member of rcll_identity_server,
    -- so a psql user cannot forge it.
    claimed := nullif(btrim(current_setting('rcll.agent', true)), '');
    IF claimed IS NOT NULL AND rcll._identity_server() THEN
        RETURN claimed;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll.current_agent() IS 'The agent identity the server resolved for this session or transaction, or NULL: a role mapped in rcll.identities, else rcll.agent set by a member of rcll_identity_server (superusers count as members).';

CREATE OR REPLACE FUNCTION rcll._carry_tags()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Consolidation rewrites facts into observations and must carry their author: and room tags
    -- across; only the trusted server may ask for that (SET LOCAL rcll.carry_tags = on).
    SELECT coalesce(current_setting('rcll.carry_tags', true), '') IN ('on', 'true', '1') AND rcll._identity_server()
$$;
COMMENT ON FUNCTION rcll._carry_tags() IS 'Internal: true when a member of rcll_identity_server has set rcll.carry_tags = on, so reserved tags (author:, room-alias:, room-new:) written by it are kept rather than discarded as forged.';

CREATE OR REPLACE FUNCTION rcll._resolve_author(claimed text, OUT author text, OUT author_source text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- No warning here: the units_room_counts_inserted statement trigger (051-room-counts.sql) warns once per
    -- write, for every client, whether or not it came through a function that called this.
    author := rcll.current_agent();
    IF author IS NOT NULL THEN
        author_source := 'server';             -- a claimed author is discarded
    ELSIF nullif(btrim(claimed), '') IS NOT NULL THEN
        author := btrim(claimed);
        author_source := 'self_declared';
    ELSE
        author_source := 'none';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._resolve_author(text) IS 'Internal: the author of a write and how it was resolved (server, self_declared, none). Never falls back to the connection''s role name.';

CREATE OR REPLACE FUNCTION rcll._importing()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Set transaction-locally by rcll.import_finish while it writes. Anyone may set it, and that is
    -- safe: it only ever takes trust away (a unit written under it has no author), never adds any.
    SELECT coalesce(current_setting('rcll.importing', true), '') = 'on'
$$;
COMMENT ON FUNCTION rcll._importing() IS 'Internal: true while rcll.import_finish writes an imported stream (rcll.importing = on for the transaction): the write triggers then keep a stream''s author as provenance only.';

CREATE OR REPLACE FUNCTION rcll._units_author()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    who record;
    tag text;
BEGIN
    -- Runs once per written row: every assignment below is skipped when it would change nothing.
    IF NEW.tags IS NULL THEN
        NEW.tags := '{}';
    -- author: tags are the server's to write; one supplied by the caller is forged and discarded.
    ELSIF array_to_string(NEW.tags, E'\x1f') LIKE '%author%' AND NOT rcll._carry_tags() THEN
        NEW.tags := ARRAY(SELECT t FROM unnest(NEW.tags) AS t
                          WHERE t NOT LIKE 'author:%' AND t NOT LIKE 'author-source:%');
    END IF;
    IF rcll._importing() THEN
        -- A stream's author is a claim from elsewhere: kept as provenance, never as this unit's author.
        NEW.provenance := NEW.provenance - 'who' - 'author_source'
            || jsonb_build_object('imported', jsonb_build_object('author', NEW.author, 'author_source', NEW.author_source,
                                                                 'who', NEW.provenance -> 'who'),
                                  'author_source', 'imported');
        NEW.author := NULL;
        NEW.author_source := 'imported';
        NEW.tags := ARRAY(SELECT t FROM unnest(NEW.tags) AS t WHERE t NOT LIKE 'author:%' AND t NOT LIKE 'author-source:%')
                    || 'author-source:imported'::text;
        RETURN NEW;
    END IF;
    who := rcll._resolve_author(NEW.author);
    NEW.author := who.author;
    NEW.author_source := who.author_source;
    IF NEW.author IS NOT NULL THEN
        -- The tag is what survives consolidation rewrites; the tag roster is the author list.
        tag := 'author:' || NEW.author;
        IF NOT tag = ANY (NEW.tags) THEN
            NEW.tags := NEW.tags || tag;
        END IF;
        IF NEW.author_source = 'self_declared' AND NOT 'author-source:self_declared' = ANY (NEW.tags) THEN
            NEW.tags := NEW.tags || 'author-source:self_declared'::text;
        END IF;
    END IF;
    -- Provenance says who, as resolved here - a "who" the caller put in it is replaced too.
    IF NEW.provenance ->> 'who' IS DISTINCT FROM NEW.author
       OR NEW.provenance ->> 'author_source' IS DISTINCT FROM NEW.author_source
       OR NOT NEW.provenance ? 'at'
       OR (NEW.document_id IS NOT NULL AND NOT NEW.provenance ? 'document_id') THEN
        NEW.provenance := NEW.provenance
            || jsonb_build_object('who', NEW.author, 'author_source', NEW.author_source)
            || CASE WHEN NEW.document_id IS NOT NULL AND NOT NEW.provenance ? 'document_id'
                    THEN jsonb_build_object('document_id', NEW.document_id) ELSE '{}'::jsonb END
            || CASE WHEN NOT NEW.provenance ? 'at' THEN jsonb_build_object('at', now()) ELSE '{}'::jsonb END;
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_author() IS 'Trigger: the author of every new unit, resolved by the server (a caller''s author and author: tags are discarded when it knows; otherwise kept as self_declared), carried on an author:<name> tag and in provenance; an imported unit (rcll._importing()) has none, the stream''s claim kept in provenance.imported.';

CREATE OR REPLACE TRIGGER units_author BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_author();

CREATE OR REPLACE FUNCTION rcll._units_author_fixed()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- The author is resolved once, when the unit is written (units_author): an UPDATE that would
    -- rewrite it - the column, how it was resolved, the author: tags or provenance's "who" - is
    -- refused for every role, so a writer cannot claim or disown a unit after the fact.
    IF NEW.author IS DISTINCT FROM OLD.author
       OR NEW.author_source IS DISTINCT FROM OLD.author_source
       OR NEW.provenance -> 'who' IS DISTINCT FROM OLD.provenance -> 'who'
       OR NEW.provenance -> 'author_source' IS DISTINCT FROM OLD.provenance -> 'author_source'
       OR ARRAY(SELECT t FROM unnest(NEW.tags) AS t WHERE t LIKE 'author:%' OR t LIKE 'author-source:%' ORDER BY t)
          IS DISTINCT FROM
          ARRAY(SELECT t FROM unnest(OLD.tags) AS t WHERE t LIKE 'author:%' OR t LIKE 'author-source:%' ORDER BY t) THEN
        RAISE EXCEPTION 'author: unit % keeps the author it was written with', OLD.unit_id
            USING ERRCODE = 'RC006', COLUMN = 'author',
                  HINT = 'A unit''s author (author, author_source, author: tags, provenance who) is resolved when it is written and cannot be changed; write a new unit instead.';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_author_fixed() IS 'Trigger: refuses an UPDATE of a unit that changes its author, author_source, author:/author-source: tags or provenance who/author_source (RC006): authorship is resolved at INSERT only.';

CREATE OR REPLACE TRIGGER units_author_fixed BEFORE UPDATE OF author, author_source, tags, provenance ON rcll.memory_units
    FOR EACH ROW WHEN (OLD.author IS DISTINCT FROM NEW.author OR OLD.author_source IS DISTINCT FROM NEW.author_source
                       OR OLD.tags IS DISTINCT FROM NEW.tags OR OLD.provenance IS DISTINCT FROM NEW.provenance)
    EXECUTE FUNCTION rcll._units_author_fixed();

CREATE OR REPLACE FUNCTION rcll._documents_author()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    who record;
BEGIN
    -- The server's identity replaces a caller's "who"; a self-declared one stays as written.
    IF rcll._importing() THEN
        NEW.provenance := NEW.provenance - 'who' - 'author_source'
            || jsonb_build_object('imported', jsonb_build_object('who', NEW.provenance -> 'who',
                                                                 'author_source', NEW.provenance -> 'author_source'),
                                  'author_source', 'imported');
        RETURN NEW;
    END IF;
    who := rcll._resolve_author(NEW.provenance ->> 'who');
    NEW.provenance := NEW.provenance
        || CASE WHEN who.author_source = 'server' THEN jsonb_build_object('who', who.author) ELSE '{}'::jsonb END
        || jsonb_build_object('author_source', who.author_source);
    IF NOT NEW.provenance ? 'at' THEN
        NEW.provenance := NEW.provenance || jsonb_build_object('at', now());
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._documents_author() IS 'Trigger: a document''s provenance names the server-resolved writer (a caller''s "who" is replaced when the server knows, else marked self_declared; an imported one keeps the stream''s claim in provenance.imported only).';

CREATE OR REPLACE TRIGGER documents_author BEFORE INSERT ON rcll.documents
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.documents'))
    EXECUTE FUNCTION rcll._documents_author();
