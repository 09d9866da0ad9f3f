-- Run-once: the type of a recall's channel weights, one value (rcll.channel_weights(...)) passed
-- to the channels and the fusion, as the scope is, instead of a parameter per channel.
CREATE TYPE rcll.channel_weights AS (
    dense    double precision,
    lexical  double precision,
    graph    double precision,
    temporal double precision,
    entity   double precision,
    session  double precision,
    context  double precision
);
COMMENT ON TYPE rcll.channel_weights IS 'Each recall channel''s weight in the fusion (its z-score is multiplied by it; 0 skips the channel), fields in rcll.recall_channel_names() order. Built by rcll.channel_weights(...), whose defaults are the product''s.';
