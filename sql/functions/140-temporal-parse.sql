-- Time expressions in a query ("last week", "in May 2023", "2 years ago", "before June") resolved to a range, in SQL.

CREATE OR REPLACE FUNCTION rcll._number_word(word text)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN word ~ '^\d+$' THEN least(word::bigint, 100000)::integer
        ELSE (ARRAY[1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 3, 3, 2, 2])[
            array_position(ARRAY['a', 'an', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight',
                                 'nine', 'ten', 'eleven', 'twelve', 'a few', 'several', 'a couple of', 'couple of'],
                           regexp_replace(btrim(word), '\s+', ' ', 'g'))] END
$$;
COMMENT ON FUNCTION rcll._number_word(text) IS 'Internal: a count written as digits or words ("two", "a few" = 3, "a couple of" = 2); NULL if not a count.';

CREATE OR REPLACE FUNCTION rcll._month_number(name text)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT array_position(ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'],
                          left(lower(name), 3))
$$;
COMMENT ON FUNCTION rcll._month_number(text) IS 'Internal: 1-12 for an English month name or abbreviation.';

CREATE OR REPLACE FUNCTION rcll.parse_time_range(query text, reference_time timestamptz DEFAULT now())
RETURNS tstzrange
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    q     text := ' ' || regexp_replace(lower(coalesce(query, '')), '\s+', ' ', 'g') || ' ';
    ref   timestamptz := coalesce(reference_time, now());
    today timestamptz := date_trunc('day', ref);
    mon   constant text := '(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)';
    num   constant text := '(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|several|a couple of|couple of)';
    days  constant text[] := ARRAY['monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday'];
    m     text[];
    r     tstzrange;
    d     timestamptz;
    n     integer;
    y     integer;
    mo    integer;
BEGIN
    IF q ~ '\mday before yesterday\M' THEN
        RETURN tstzrange(today - interval '2 days', today - interval '1 day');
    END IF;
    -- Open ranges wrap another expression: "before <x>", "after <x>", "since <x>", "until <x>".
    m := regexp_match(q, '\m(before|after|since|until|till|prior to|earlier than|later than) (.+)$');
    IF m IS NOT NULL THEN
        r := rcll.parse_time_range(m[2], ref);
        IF r IS NOT NULL THEN
            RETURN CASE
                WHEN m[1] IN ('before', 'prior to', 'earlier than') THEN tstzrange(NULL, lower(r))
                WHEN m[1] IN ('until', 'till') THEN tstzrange(NULL, upper(r))
                WHEN m[1] = 'since' THEN tstzrange(lower(r), NULL)
                ELSE tstzrange(upper(r), NULL) END;
        END IF;
    END IF;

    -- Dates: 2023-05-07, 7 May 2023, May 7th, 2023.
    m := regexp_match(q, '\m(\d{4})-(\d{1,2})-(\d{1,2})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[1]::int, m[2]::int, m[3]::int, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    m := regexp_match(q, '\m(\d{1,2})(?:st|nd|rd|th)? (?:of )?' || mon || '\.?,? (\d{4})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[3]::int, rcll._month_number(m[2]), m[1]::int, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    m := regexp_match(q, '\m' || mon || '\.? (\d{1,2})(?:st|nd|rd|th)?,? (\d{4})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[3]::int, rcll._month_number(m[1]), m[2]::int, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    -- Month and year: "May 2023", "in may of 2023".
    m := regexp_match(q, '\m' || mon || '\.?,? (?:of )?(\d{4})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[2]::int, rcll._month_number(m[1]), 1, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 month');
    END IF;

    -- "3 days ago", "two weeks ago", "a year ago": the day/week/month/year that contains it.
    m := regexp_match(q, '\m' || num || ' (day|week|month|year)s? ago\M');
    IF m IS NOT NULL AND rcll._number_word(m[1]) IS NOT NULL THEN
        d := date_trunc(m[2], ref - make_interval(days => CASE m[2] WHEN 'day' THEN 1 WHEN 'week' THEN 7 ELSE 0 END * rcll._number_word(m[1]),
                                                  months => CASE m[2] WHEN 'month' THEN 1 WHEN 'year' THEN 12 ELSE 0 END * rcll._number_word(m[1])));
        RETURN tstzrange(d, d + ('1 ' || m[2])::interval);
    END IF;
    -- "in the last 3 days", "past two weeks": up to the reference time.
    m := regexp_match(q, '\m(?:last|past|previous) ' || num || ' (day|week|month|year)s?\M');
    IF m IS NOT NULL AND rcll._number_word(m[1]) IS NOT NULL THEN
        RETURN tstzrange(ref - rcll._number_word(m[1]) * ('1 ' || m[2])::interval, ref, '[]');
    END IF;
    -- "last week", "this month", "next year", "last weekend", "earlier this week".
    m := regexp_match(q, '\m(last|this|next|previous|past|current) (week|month|year|weekend)\M');
    IF m IS NOT NULL THEN
        IF m[2] = 'weekend' THEN
            d := date_trunc('week', ref) + interval '5 days';          -- this week's Saturday
            d := d + CASE WHEN m[1] IN ('last', 'previous', 'past') THEN interval '-7 days'
                          WHEN m[1] = 'next' THEN interval '7 days' ELSE interval '0' END;
            RETURN tstzrange(d, d + interval '2 days');
        END IF;
        d := date_trunc(m[2], ref) + CASE WHEN m[1] IN ('last', 'previous', 'past') THEN -1 WHEN m[1] = 'next' THEN 1 ELSE 0 END
                                     * ('1 ' || m[2])::interval;
        RETURN tstzrange(d, d + ('1 ' || m[2])::interval);
    END IF;
    IF q ~ '\m(yesterday|last night)\M' THEN
        RETURN tstzrange(today - interval '1 day', today);
    ELSIF q ~ '\m(today|tonight|this morning|this afternoon|this evening)\M' THEN
        RETURN tstzrange(today, today + interval '1 day');
    ELSIF q ~ '\mtomorrow\M' THEN
        RETURN tstzrange(today + interval '1 day', today + interval '2 days');
    END IF;

    -- Weekdays: "on Monday", "last friday" = the most recent one before today ("on Monday" may
    -- be today).
    m := regexp_match(q, '\m(last |on |this |past )?(monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\M');
    IF m IS NOT NULL THEN
        n := (extract(isodow FROM today)::int - array_position(days, m[2]) + 7) % 7;
        IF n = 0 AND coalesce(m[1], '') = 'last ' THEN
            n := 7;
        END IF;
        d := today - n * interval '1 day';
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    -- Day and month without a year ("May 7th", "7 of May"): the most recent one.
    m := regexp_match(q, '\m' || mon || '\.? (\d{1,2})(?:st|nd|rd|th)?\M');
    IF m IS NULL THEN
        m := regexp_match(q, '\m(\d{1,2})(?:st|nd|rd|th)? (?:of )?' || mon || '\M');
        IF m IS NOT NULL THEN
            m := ARRAY[m[2], m[1]];
        END IF;
    END IF;
    IF m IS NOT NULL AND m[2]::int BETWEEN 1 AND 31 THEN
        mo := rcll._month_number(m[1]);
        y := extract(year FROM today)::int;
        d := make_timestamptz(y, mo, least(m[2]::int, 28), 0, 0, 0) + (least(m[2]::int, 31) - least(m[2]::int, 28)) * interval '1 day';
        IF d > ref THEN
            d := d - interval '1 year';
        END IF;
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    -- A month alone ("in March", "last May"): the most recent one that has begun. "may" counts as a
    -- month only after a preposition ("in may"), not as a verb.
    m := regexp_match(q, '\m(in |during |since |of |early |late |mid |mid-|last |this |by )?' || mon || '\M');
    IF m IS NOT NULL AND NOT (m[2] = 'may' AND m[1] IS NULL) THEN
        mo := rcll._month_number(m[2]);
        y := extract(year FROM today)::int;
        IF mo > extract(month FROM today)::int OR (coalesce(m[1], '') = 'last ' AND mo = extract(month FROM today)::int) THEN
            y := y - 1;
        END IF;
        d := make_timestamptz(y, mo, 1, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 month');
    END IF;
    -- A year ("in 2023").
    m := regexp_match(q, '\m((?:19|20)\d{2})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[1]::int, 1, 1, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 year');
    END IF;
    IF q ~ '\m(recently|lately|recent)\M' THEN
        RETURN tstzrange(ref - interval '30 days', ref, '[]');
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll.parse_time_range(text, timestamptz)
    IS 'The time range a query''s time expression names, resolved against reference_time in the session time zone: dates, "May 2023", "in March", "2023", "yesterday", "last week", "this month", "3 days ago", "past two weeks", weekdays, "recently", and "before/after/since/until <any of those>". NULL when the query names no time.';
