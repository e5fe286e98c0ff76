"""specan import vllm-responses on streamed responses (issue 13, section 5; docs/importers.md).

Inputs are tests/fixtures/streams/ (tests/fixtures/streams/SOURCES.md says which
lines are real vLLM output and which were written). Every expected value is worked
out by hand in a comment, and a stream must give exactly the rows of the whole
response it stands for.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.ingest.importers import MalformedInput
from analyzer.ingest.importers.common import read_jsonl
from analyzer.ingest.importers.responses import Where
from analyzer.ingest.importers.vllm_responses import dense_histogram
from imported import run, t

STREAMS = Path(__file__).parent / "fixtures" / "streams"
UTC = dt.timezone.utc
QWEN = "chatcmpl-8b2b91720edd4372b0579e89255b4828"       # vLLM issue #35705
DSV4 = "chatcmpl-95f70ae00614b063"                       # vLLM pull request #45678
NO_USAGE = "stream without a usage chunk: request it with stream_options.include_usage"

# The stream of chat_stream.sse (and chat_whole.jsonl), worked out by hand:
#   per_step_accepted [2,0,3,3] (3 drafted each) → committed 3+1+4+4 = 12, but completion_tokens 10 − 1 = 9:
#   3 too many, so the last round commits 4 − 3 = 1 and its stop_reason comes from finish_reason length
QWEN_ROUNDS = [(3, 2, 3, None), (3, 0, 1, None), (3, 3, 4, None), (3, 3, 1, "length")]


def imported(tmp_path: Path, *files, name: str = "t") -> tuple[Path, str]:
    out = tmp_path / name
    result = run("import", "vllm-responses", *files, "--deployment", "d", "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.stdout


def rows(root: Path, table: str) -> list[dict]:
    found = []
    for path in sorted((root / table).rglob("*.parquet")):
        found += pq.read_table(path, partitioning=None).to_pylist()
    return sorted(found, key=lambda r: (r.get("request_id", ""), r.get("round_idx", 0)))


def rounds_of(root: Path, request_id: str) -> list[tuple]:
    return [(r["num_draft_tokens"], r["num_accepted_tokens"], r["num_committed_tokens"], r["stop_reason"])
            for r in rows(root, "rounds") if r["request_id"] == request_id]


def request(root: Path, request_id: str) -> dict:
    (found,) = [r for r in rows(root, "requests") if r["request_id"] == request_id]
    return found


def notes(root: Path) -> list[str]:
    return [r["note"] for r in pq.read_table(next((root / "import_notes").rglob("*.parquet"))).to_pylist()]


def assert_same_rows(a: Path, b: Path) -> None:
    assert rows(a, "requests") == rows(b, "requests")
    assert rows(a, "rounds") == rows(b, "rounds")


# --------------------------------------------------------------------------- one stream = its whole response


def test_stream_rows_equal_the_whole_response_rows(tmp_path):
    whole, _ = imported(tmp_path, STREAMS / "chat_whole.jsonl", name="whole")
    stream, stdout = imported(tmp_path, STREAMS / "chat_stream.sse", name="stream")
    assert_same_rows(stream, whole)
    r = request(stream, QWEN)
    # arrival = created 1772423572 = 2026-03-02T03:52:52Z; first token = + queue 2 + ttft 48 ms = .050;
    # finish = + generation 90 ms = .140 (metrics of the final chunk)
    assert (r["arrival_time"], r["first_token_time"], r["finish_time"]) == (
        t("2026-03-02T03:52:52"), t("2026-03-02T03:52:52.050"), t("2026-03-02T03:52:52.140"))
    # usage of the final chunk; finish_reason from the chunk before it (the usage chunk has "choices": [])
    assert (r["prompt_tokens"], r["output_tokens"], r["finish_reason"]) == (22, 10, "length")
    assert rounds_of(stream, QWEN) == QWEN_ROUNDS
    assert "1 request assembled from streamed chunks" in stdout
    assert "skipped:" not in stdout            # data: [DONE] is framing, not a skipped record
    assert rows(stream, "deployments")[0]["model"] == "qwen3_8b"


def test_sse_with_comments_event_id_retry_and_split_data(tmp_path):
    # proxy_capture.sse: ':' comments, event:/id:/retry: lines, runs of blank lines, and the final
    # chunk's data split over two data: lines (SSE joins them with a newline) — the same stream
    whole, _ = imported(tmp_path, STREAMS / "chat_whole.jsonl", name="whole")
    sse, stdout = imported(tmp_path, STREAMS / "proxy_capture.sse", name="sse")
    assert_same_rows(sse, whole)
    assert "skipped:" not in stdout


def test_crlf_line_endings(tmp_path):
    src = tmp_path / "crlf.sse"
    src.write_bytes((STREAMS / "proxy_capture.sse").read_bytes().replace(b"\n", b"\r\n"))
    whole, _ = imported(tmp_path, STREAMS / "chat_whole.jsonl", name="whole")
    crlf, _ = imported(tmp_path, src, name="crlf")
    assert_same_rows(crlf, whole)


def test_data_wrapped_bodies(tmp_path):
    # wrapped.jsonl: {"data": chunk} per line (one with event/id keys beside data, one with the
    # body kept as JSON text) and {"data": "[DONE]"} — the same stream again
    whole, _ = imported(tmp_path, STREAMS / "chat_whole.jsonl", name="whole")
    wrapped, stdout = imported(tmp_path, STREAMS / "wrapped.jsonl", name="wrapped")
    assert_same_rows(wrapped, whole)
    assert "skipped:" not in stdout


def test_per_choice_speculative_decoding_stats_with_a_sparse_histogram(tmp_path):
    whole, _ = imported(tmp_path, STREAMS / "choice_stats_whole.jsonl", name="whole")
    stream, stdout = imported(tmp_path, STREAMS / "choice_stats.sse", name="stream")
    assert_same_rows(stream, whole)
    # acceptance_histogram {"0": 39, "1": 1, "3": 3} with num_spec_tokens 3 → dense [39, 1, 0, 3];
    # 129 drafts = 43 steps × 3, so the rebuild is exact: 39 steps accept 0, 1 accepts 1, 3 accept 3,
    # ascending; committed 39·1 + 2 + 3·4 = 53 = completion_tokens 54 − 1, the last stops (finish stop → eos)
    assert rounds_of(stream, "chatcmpl-choice-stats") == (
        [(3, 0, 1, None)] * 39 + [(3, 1, 2, None)] + [(3, 3, 4, None)] * 2 + [(3, 3, 4, "eos")])
    r = request(stream, "chatcmpl-choice-stats")
    # created 1795867210 = 2026-11-28T12:00:10Z; + queue 1 + ttft 20 ms; + generation 400 ms
    assert (r["first_token_time"], r["finish_time"]) == (t("2026-11-28T12:00:10.021"), t("2026-11-28T12:00:10.421"))
    assert (r["prompt_tokens"], r["output_tokens"], r["finish_reason"]) == (30, 54, "stop")
    assert "read from choices[0].speculative_decoding_stats" in stdout
    assert rows(stream, "deployments")[0]["num_speculative_tokens"] == 3
    # accept length 1 + 10 / 43: what the report computes from these rounds
    result = run("report", stream, "--format", "json")
    assert result.exit_code == 0, result.output
    (dep,) = json.loads(result.stdout)["deployments"]
    assert dep["mean_accept_length"] == pytest.approx(1 + 10 / 43)


def test_dense_histogram():
    where = Where(Path("x"), 1)
    label = "choices[0].speculative_decoding_stats."
    stats = {"acceptance_histogram": {"0": 39, "1": 1, "3": 3}, "num_spec_tokens": 3}
    assert dense_histogram(stats, where, label)["acceptance_histogram"] == [39, 1, 0, 3]
    # no steps: every bucket 0, num_spec_tokens + 1 of them
    assert dense_histogram({"acceptance_histogram": {}, "num_spec_tokens": 3}, where, label)[
        "acceptance_histogram"] == [0, 0, 0, 0]
    # without num_spec_tokens the largest key sets the length
    assert dense_histogram({"acceptance_histogram": {"2": 5}}, where, label)["acceptance_histogram"] == [0, 0, 5]
    # already dense: kept
    assert dense_histogram({"acceptance_histogram": [1, 2]}, where, label)["acceptance_histogram"] == [1, 2]
    with pytest.raises(MalformedInput, match="acceptance_histogram: expected step counts keyed by accepted"):
        dense_histogram({"acceptance_histogram": {"x": 1}}, where, label)


def test_malformed_sparse_histogram_is_exit_2_naming_the_line(tmp_path):
    src = tmp_path / "bad.sse"
    src.write_text((STREAMS / "choice_stats.sse").read_text(encoding="utf-8").replace('"3":3}', '"three":3}'),
                   encoding="utf-8")
    result = run("import", "vllm-responses", src, "--deployment", "d", "--out", tmp_path / "t")
    assert result.exit_code == 2, result.output
    # the finish chunk, line 5, carries the stats
    assert "bad.sse:5:" in result.stderr and "'three': 3" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- skips, [DONE], several streams


def test_stream_without_usage_chunk_is_skipped_and_counted(tmp_path):
    # vLLM issue #6083: a stream requested without stream_options.include_usage. Nothing else in the
    # file, so nothing imports: exit 2 naming the file, the reason and where, and nothing written.
    out = tmp_path / "t"
    result = run("import", "vllm-responses", STREAMS / "no_usage.sse", "--deployment", "d", "--out", out)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    # (an unfinished stream is only known to be one at the end of the input, so it has no line)
    assert line == f"Error: {STREAMS / 'no_usage.sse'}: nothing to import: no request became a trace row (1 {NO_USAGE})"
    assert not out.exists()


def test_mixed_file_whole_responses_and_streams(tmp_path):
    # mixed.txt: a whole chat.completion (JSON line), the #6083 stream without usage, [DONE],
    # the qwen3_8b stream, [DONE], then a whole text_completion
    out, stdout = imported(tmp_path, STREAMS / "mixed.txt")
    assert sorted(r["request_id"] for r in rows(out, "requests")) == sorted(["chatcmpl-mixed-1", QWEN, "cmpl-mixed-2"])
    assert f"        1  {NO_USAGE}" in stdout
    # plain: completion_tokens 3 → 2 rounds of one token; 2 → 1 round, cut by length
    assert rounds_of(out, "chatcmpl-mixed-1") == [(0, 0, 1, None), (0, 0, 1, "eos")]
    assert rounds_of(out, "cmpl-mixed-2") == [(0, 0, 1, "length")]
    assert rounds_of(out, QWEN) == QWEN_ROUNDS
    assert len(rows(out, "rounds")) == 2 + 1 + 4
    assert "1 request assembled from streamed chunks" in stdout


def test_interleaved_streams_in_one_capture(tmp_path):
    # interleaved.sse: the qwen3_8b stream and a DeepSeek-V4-Flash stream (continuous usage: a running
    # usage on every chunk) interleaved, data: [DONE] after each
    out, stdout = imported(tmp_path, STREAMS / "interleaved.sse")
    assert sorted(r["request_id"] for r in rows(out, "requests")) == sorted([DSV4, QWEN])
    r = request(out, DSV4)
    # usage of the final chunk, 16 + 24, not one of the running counts 20..23 before it
    assert (r["prompt_tokens"], r["output_tokens"], r["finish_reason"]) == (16, 24, "length")
    # created 1782114956 = 2026-06-22T07:55:56Z; no metrics object, so no token times
    assert (r["arrival_time"], r["first_token_time"], r["finish_time"]) == (t("2026-06-22T07:55:56"), None, None)
    # no speculative counts: plain decoding, 24 − 1 = 23 rounds of one token, the last cut by length
    assert rounds_of(out, DSV4) == [(0, 0, 1, None)] * 22 + [(0, 0, 1, "length")]
    assert rounds_of(out, QWEN) == QWEN_ROUNDS
    assert len(rows(out, "rounds")) == 23 + 4
    assert "2 requests assembled from streamed chunks" in stdout
    assert "skipped:" not in stdout


def test_the_same_id_streamed_twice_is_a_repeated_request(tmp_path):
    # a stream ends at its usage chunk; the same id again is another response, skipped like a repeated one
    src = tmp_path / "twice.sse"
    src.write_text((STREAMS / "chat_stream.sse").read_text(encoding="utf-8") * 2, encoding="utf-8")
    out, stdout = imported(tmp_path, src)
    assert [r["request_id"] for r in rows(out, "requests")] == [QWEN]
    assert "        1  request id repeated in this import" in stdout


def test_done_alone_and_done_wrapped(tmp_path):
    src = tmp_path / "done.txt"
    src.write_text('data: [DONE]\n\n{"data": "[DONE]"}\ndata:[DONE]\n', encoding="utf-8")
    # [DONE] is framing, never a skipped record: nothing at all to import
    result = run("import", "vllm-responses", src, "--deployment", "d", "--out", tmp_path / "t")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {src}: nothing to import: no request became a trace row (no records)"


def test_streams_and_whole_responses_from_several_files(tmp_path):
    # a stream and the whole responses of another file in one import: both kinds are read
    out, _ = imported(tmp_path, STREAMS / "chat_stream.sse", STREAMS / "choice_stats_whole.jsonl")
    assert sorted(r["request_id"] for r in rows(out, "requests")) == sorted(["chatcmpl-choice-stats", QWEN])


# --------------------------------------------------------------------------- read_jsonl


def test_read_jsonl_sse_framing(tmp_path):
    src = tmp_path / "x.sse"
    src.write_text(': hello\nevent: message\nid: 7\nretry: 10\ndata: {"a":\ndata:  1}\n\n'
                   '{"b": 2}\n\ndata:{"c": 3}\ndata: [DONE]\n', encoding="utf-8")
    # a data: event split over two lines is joined and given at its first line; a plain JSON line
    # stays itself; "data:" without a space is the same field
    assert list(read_jsonl(src, sse=True)) == [(5, {"data": {"a": 1}}), (8, {"b": 2}), (10, {"data": {"c": 3}}),
                                              (11, {"data": "[DONE]"})]


def test_read_jsonl_truncated_data_line_names_its_line(tmp_path):
    src = tmp_path / "cut.sse"
    lines = (STREAMS / "chat_stream.sse").read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4][:80]                     # the third chunk, line 5, cut mid-object
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(MalformedInput, match="not valid JSON") as caught:
        list(read_jsonl(src, sse=True))
    assert caught.value.line == 5
    result = run("import", "vllm-responses", src, "--deployment", "d", "--out", tmp_path / "t")
    assert result.exit_code == 2 and "cut.sse:5:" in result.stderr and "not valid JSON" in result.stderr


def test_read_jsonl_without_sse_is_unchanged(tmp_path):
    # other importers (sglang-responses) don't read SSE: a data: line is not JSON there
    with pytest.raises(MalformedInput, match="not valid JSON") as caught:
        list(read_jsonl(STREAMS / "chat_stream.sse"))
    assert caught.value.line == 1
