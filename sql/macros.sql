-- Macros the views share. They are stored in the database with the views, so plain
-- duckdb on a `specan load` database has them too. The bucket macros come from the
-- seed sql/seeds/buckets.csv (analyzer/analysis/buckets.py).

-- Streaming gaps from packed emission keys (request_rounds). A key is
--     round_idx · 2^43 + 2^41 + (end_us mod 2^41)
-- and keys are sorted, so they run in round_idx order.
--
-- packed_key_gap_us(d): the gap between two adjacent keys that differ by d. The
-- low 42 bits of a key are under half of 2^43, so round(d / 2^43) is how far
-- round_idx moved; the rest is the difference of end times mod 2^41, brought back
-- into [-2^40, 2^40): exact while a request's emissions span less than 2^40 µs.
create or replace macro packed_key_gap_us(d) as
    ((d - (d + 4398046511104) // 8796093022208 * 8796093022208) % 2199023255552 + 2199023255552 + 1099511627776)
        % 2199023255552 - 1099511627776;

-- The first gap runs from the first token (first_token_us, when known) to the first
-- emission, whose full time is rebuilt from first_end_us, the earliest emission.
create or replace macro packed_first_gap_us(keys, first_end_us, first_token_us) as
    case
        when first_token_us is not null and array_length(keys) > 0
            then [first_end_us + ((keys[1] % 2199023255552 - first_end_us) % 2199023255552 + 2199023255552)
                  % 2199023255552 - first_token_us]
        else []
    end;

-- When a step ended: its start plus its duration, to the microsecond. A round's
-- tokens reach the user then (streaming gaps). The row rule round_out_of_order orders
-- a request's rounds by the same end (analyzer/ingest/rules.py, which reads no macro).
create or replace macro step_end_time(start_time, duration_ms) as
    start_time + to_microseconds(cast(round(duration_ms * 1000) as bigint));

-- A time in ms as a fixed-point DECIMAL(18, 6): exact to the nanosecond.
-- A sum of DOUBLE depends on the order its rows are added in, which parallel
-- threads change from run to run, so the last digits of every time sum would
-- too. A sum of DECIMAL is an integer sum (HUGEINT), exact in any order. Trace
-- times are whole microseconds (timestamps) or at finest nanoseconds, so this
-- loses nothing they hold; digits below 1 ns are rounded. Divide such a sum by
-- a count, or cast it, to get a DOUBLE back. Up to 10^12 ms per value.
create or replace macro exact_ms(ms) as cast(ms as decimal(18, 6));

-- The first 32 bits of md5(text), as an integer: the same value on every engine.
create or replace macro md5_prefix(text) as cast(('0x' || substr(md5(text), 1, 8)) as bigint);

-- The group of a request for the bootstrap intervals (request_group_cells,
-- headline_intervals): md5_prefix of its key, deployment_id/request_id/arrival time in µs,
-- mod 256. The arrival time tells apart requests that share an id in different partitions
-- (the sample's dates); a request without a requests row (its rounds only) has none, so
-- those share a group. md5 is the same on every engine (request_uid, each engine's own
-- 64-bit hash, is not), so DuckDB and Spark resample the same groups. Called once per
-- request, never per round (md5 per round costs 7-21 s per 50M rounds). 256 groups:
-- docs/metrics.md says why.
create or replace macro request_group(deployment_id, request_id, arrival_us) as
    md5_prefix(deployment_id || '/' || request_id || coalesce('/' || cast(arrival_us as varchar), '')) % 256;

-- A draw of Poisson(1) from a 64-bit hash h: the inverse of its distribution function
-- at h / 2^64. A Poisson bootstrap weighs each group of a replicate by one such draw;
-- drawn from a hash, the same run gives the same weights (log_speedup_intervals).
create or replace macro poisson1_draw(h) as
    case
        when cast(h as double) / 18446744073709551616.0 < 0.36787944117144233 then 0
        when cast(h as double) / 18446744073709551616.0 < 0.7357588823428847 then 1
        when cast(h as double) / 18446744073709551616.0 < 0.9196986029286058 then 2
        when cast(h as double) / 18446744073709551616.0 < 0.9810118431238462 then 3
        when cast(h as double) / 18446744073709551616.0 < 0.9963401531726563 then 4
        when cast(h as double) / 18446744073709551616.0 < 0.9994058151824183 then 5
        when cast(h as double) / 18446744073709551616.0 < 0.9999167588507119 then 6
        else 7
    end;

-- The same draw as a DOUBLE, for the weighted sums of the bootstrap (headline_intervals,
-- list_dot_product over a replicate's group weights).
create or replace macro poisson_weight(h) as cast(poisson1_draw(h) as double);

-- The Poisson(1) weight of one group of one deployment in one replicate of a bootstrap.
-- DuckDB's hash(a, b, ...) folds its arguments together by XOR: with the group last every
-- weight was F(replicate) XOR h(group), one pattern shifted in every replicate (1,115
-- distinct weight vectors of 16,000 over 256 groups, two groups' weights correlated at
-- |r| = 0.58), and with the seed last another seed only flipped fixed bits of the same
-- draws (weights of seeds 0 and 1 correlated at r = 0.34). So the deployment is hashed
-- alone, XORed with (seed, replicate, group) packed into one integer (replicate < 2^20,
-- group < 2^12), and that one value hashed again, which mixes every bit of it.
-- tests/test_bootstrap.py checks that different groups' weights are uncorrelated, that
-- every replicate is distinct, and that another seed draws independent weights.
create or replace macro bootstrap_hash(deployment_id, replicate, grp, seed) as
    hash(xor(hash(deployment_id), cast(((cast(seed as bigint) * 1048576 + replicate) * 4096 + grp) as ubigint)));

create or replace macro bootstrap_weight(deployment_id, replicate, grp, seed) as
    poisson_weight(bootstrap_hash(deployment_id, replicate, grp, seed));

-- An intervals row that is a benchmark client's summary of one run (vllm-bench,
-- sglang-bench): its numbers are the benchmark's traffic, not production. The interval
-- views keep such rows apart (interval_acceptance.benchmark) and the logs speedup never
-- reads them (log_intervals takes engine logs only).
create or replace macro benchmark_source(interval_source) as interval_source in ('vllm_bench', 'sglang_bench');

-- The request keys the report shows of each deployment's output_tokens_mismatch
-- (output_tokens_mismatch_examples): the first ones in key order.
create or replace macro mismatch_examples() as 3;

-- Channel reconciliation (reconciliation): two channels of one engine disagree when a
-- total differs by more than this share of the reference channel's (docs/metrics.md),
-- counted over their common time span widened by the slack on each side (clocks differ
-- between channels: a llama.cpp response's `created` is a whole second).
create or replace macro reconciliation_tolerance() as 0.01;
create or replace macro reconciliation_slack_us() as 1000000;
create or replace macro relative_difference(x, reference) as
    case when reference <> 0 then (x - reference) / reference when x = reference then 0.0 end;
create or replace macro disagrees_with(x, reference) as
    coalesce(x <> reference and (reference = 0 or abs((x - reference) / reference) > reconciliation_tolerance()),
             false);

-- How detailed a channel of acceptance counts is, most detailed first: the rounds, an
-- engine's log, its per-request responses, its Prometheus counters, anything else. When
-- one deployment has several, the most detailed is the reference (reconciliation) and
-- the one an hour of interval_acceptance is counted from: each counts the same drafts.
create or replace macro channel_precedence(channel) as
    case
        when channel = 'rounds' then 1
        -- the recorder inside vLLM counts what the engine's log prints, from the same objects
        when channel in ('llamacpp_log', 'vllm_log', 'sglang_log', 'vllm_recorder') then 2
        when channel = 'llamacpp_response' then 3
        when channel = 'prometheus' then 4
        else 5
    end;

-- The load cell of a load (a batch size, a running-request count, a request's concurrency
-- rounded to the nearest whole request): the fine cells the matched speedup measures the
-- baseline in (docs/metrics.md, "Speedup at the load and context each step ran at").
-- Loads up to 16 are cells of their own; above, each batch bucket (17-32, 33-64, ...) is
-- split into 8 cells of equal width (2, 4, 8, ... requests), so a cell spans at most 1/8
-- of its bucket and nests in it. A cell is named by its lowest load.
create or replace macro load_cell(load) as
    case
        when load is null then null
        when round(load) <= 16 then cast(greatest(round(load), 0) as bigint)
        else batch_bucket_min(batch_bucket(cast(round(load) as bigint)))
             + (batch_bucket_min(batch_bucket(cast(round(load) as bigint))) - 1) // 8
               * ((cast(round(load) as bigint) - batch_bucket_min(batch_bucket(cast(round(load) as bigint))))
                  // ((batch_bucket_min(batch_bucket(cast(round(load) as bigint))) - 1) // 8))
    end;
