"""sglang-responses reads the OpenAI-compatible ``sglext.spec_tokens_details`` (SGLang's
``return_spec_tokens_details``) besides ``meta_info``.

SGLang builds the object by copying meta_info's counts (``spec_tokens_details_from_meta_info`` in
python/sglang/srt/entrypoints/openai/utils.py): ``spec_num_correct_drafts`` accepted drafts,
``spec_num_proposed_drafts`` proposed drafts, ``spec_verify_ct`` verify steps, and
``spec_correct_drafts_histogram[j]`` the verify steps that accepted exactly j drafts; missing
values become 0 or []. It sits at the response level, one object for n = 1, a list for n > 1.
No real response with it was found in public issues (tests/fixtures/README.md): the responses
below are built from those definitions, and the arithmetic between the fields is checked by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from imported import rows, run


def response(rid: str, details, completion: int, finish: str = "stop") -> dict:
    return {"id": rid, "object": "chat.completion", "created": 1795867200, "model": "qwen3-8b",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": 40, "completion_tokens": completion, "total_tokens": 40 + completion},
            "sglext": {"spec_tokens_details": details}}


def write(path: Path, values: list) -> Path:
    path.write_text("".join(json.dumps(v) + "\n" for v in values), encoding="utf-8")
    return path


def test_spec_tokens_details_give_the_rounds(tmp_path):
    # 5 verify steps of 3 drafts: 15 proposed; histogram [1, 2, 0, 2] = 1+2+0+2 = 5 steps,
    # accepted 0·1 + 1·2 + 2·0 + 3·2 = 8 = spec_num_correct_drafts; committed Σ(accepted + 1) = 8 + 5 = 13,
    # which is completion_tokens − 1 (the first token comes from prefill) for completion_tokens 14
    details = {"spec_accept_rate": 8 / 15, "spec_accept_length": 14 / 5, "spec_num_correct_drafts": 8,
               "spec_num_proposed_drafts": 15, "spec_verify_ct": 5, "spec_correct_drafts_histogram": [1, 2, 0, 2],
               "spec_cap_length": 0.0, "spec_block_accept_length": 0.0, "spec_cap_lens_histogram": []}
    src = write(tmp_path / "r.jsonl", [response("chatcmpl-1", details, 14)])
    out = tmp_path / "t"
    result = run("import", "sglang-responses", src, "--deployment", "sg", "--out", out)
    assert result.exit_code == 0, result.output
    got = rows(out, "rounds")
    # rebuilt from the histogram in ascending accepted order: 0, 1, 1, 3, 3
    assert [(r["num_draft_tokens"], r["num_accepted_tokens"], r["num_committed_tokens"]) for r in got] == \
        [(3, 0, 1), (3, 1, 2), (3, 1, 2), (3, 3, 4), (3, 3, 4)]
    assert sum(r["num_committed_tokens"] for r in got) == 13
    (request,) = rows(out, "requests")
    assert (request["request_id"], request["output_tokens"], request["prompt_tokens"]) == ("chatcmpl-1", 14, 40)
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 3      # 15 proposed / 5 steps
    assert "read from sglext.spec_tokens_details" in result.stdout


def test_fields_that_disagree_give_no_rounds(tmp_path):
    base = {"spec_num_correct_drafts": 8, "spec_num_proposed_drafts": 15, "spec_verify_ct": 5,
            "spec_correct_drafts_histogram": [1, 2, 0, 2]}
    bad_sum = dict(base, spec_num_correct_drafts=9)            # 0·1 + 1·2 + 3·2 = 8 ≠ 9
    bad_steps = dict(base, spec_verify_ct=6, spec_num_proposed_drafts=18)   # histogram counts 5 steps, not 6
    src = write(tmp_path / "r.jsonl", [response("a", bad_sum, 14), response("b", bad_steps, 14),
                                       response("c", base, 14)])
    out = tmp_path / "t"
    result = run("import", "sglang-responses", src, "--deployment", "sg", "--out", out)
    assert result.exit_code == 0, result.output
    assert {r["request_id"] for r in rows(out, "rounds")} == {"c"}
    assert len(rows(out, "requests")) == 3
    assert "histogram does not add up to the accepted drafts" in result.stdout
    assert "histogram does not count spec_verify_ct steps" in result.stdout


def test_no_speculation_and_several_choices(tmp_path):
    # SGLang fills missing counts with 0 and []: a response that did not speculate is plain decoding
    plain = {"spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 0, "spec_verify_ct": 0,
             "spec_correct_drafts_histogram": []}
    two = response("n2", [plain, plain], 5)
    src = write(tmp_path / "r.jsonl", [response("p", plain, 5), two])
    out = tmp_path / "t"
    result = run("import", "sglang-responses", src, "--deployment", "sg", "--method", "none", "--out", out)
    assert result.exit_code == 0, result.output
    # 5 completion tokens, the first from prefill: 4 plain rounds of 1 token
    assert [(r["num_draft_tokens"], r["num_committed_tokens"]) for r in rows(out, "rounds")] == [(0, 1)] * 4
    assert "sglext.spec_tokens_details of several choices (n > 1)" in result.stdout


def test_a_wrong_type_is_exit_2_naming_file_and_line(tmp_path):
    src = write(tmp_path / "r.jsonl", [response("a", {"spec_num_correct_drafts": 8, "spec_num_proposed_drafts": 15,
                                                      "spec_verify_ct": "5",
                                                      "spec_correct_drafts_histogram": [1, 2, 0, 2]}, 14)])
    result = run("import", "sglang-responses", src, "--deployment", "sg", "--out", tmp_path / "t")
    assert result.exit_code == 2, result.output
    assert "r.jsonl:1: sglext.spec_tokens_details.spec_verify_ct: expected an integer" in result.stderr
    assert len(result.stderr.splitlines()) == 1
