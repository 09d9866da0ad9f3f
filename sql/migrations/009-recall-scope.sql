-- Run-once: the type of a recall's scope, resolved once per recall (rcll.recall_scope) and
-- passed to every channel: the bank's id, the rooms with their aliases expanded, the authors
-- with mine applied, and the filters as given.
CREATE TYPE rcll.recall_scope AS (
    bank_id              integer,
    rooms                text[],
    authors              text[],
    include_unattributed boolean,
    halls                text[],
    layers               text[],
    tags_any             text[],
    tags_all             text[],
    thread               text,
    as_of                timestamptz
);
COMMENT ON TYPE rcll.recall_scope IS 'What a recall may read, resolved: bank id, expanded rooms (NULL = all), resolved authors (NULL = all), whether unattributed units pass an author filter, halls, layers, tags (any / all), thread and validity instant (NULL = no filter). Built by rcll.recall_scope(...).';
