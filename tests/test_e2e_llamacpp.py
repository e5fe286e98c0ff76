"""End to end: a real llama.cpp speculating on the CPU (e2e/llamacpp/run.sh), read by specan's importers.

run.sh builds llama-server once (cached under ~/.cache/specan-e2e/<version>/; the first build takes
minutes), writes two tiny random-weight models and runs the server twice: `same` (draft = target: greedy
decoding accepts almost every drafted token) and `other` (a draft of other random weights: almost none),
at two speculation lengths. What llama.cpp printed is parsed here with plain regular expressions,
independently of the importers, and every channel's import must give exactly those totals.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import USER_CACHE_HOME
from llamacpp_printed import channel_totals_agree, channels_agree, log_request_totals

RUN_SH = Path(__file__).parents[1] / "e2e" / "llamacpp" / "run.sh"
DRAFT_N_MAX = (4, 2)

pytestmark = pytest.mark.xdist_group("llamacpp_e2e")


@pytest.fixture(scope="module", params=DRAFT_N_MAX, ids=lambda n: f"n_max={n}")
def e2e_out(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(f"llamacpp_e2e_{request.param}")
    # the build's cache in the user's cache home (not the tests' private one), the models
    # written by this interpreter (which has gguf, the [test] extra)
    env = {**os.environ, "XDG_CACHE_HOME": USER_CACHE_HOME, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(RUN_SH), str(out), str(request.param)], capture_output=True, text=True,
                          timeout=3600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.parametrize("run", ["same", "other"])
def test_channels_import_with_the_printed_totals(e2e_out, run, tmp_path):
    channel_totals_agree(e2e_out / run, run, tmp_path)


def test_same_draft_accepts_far_more_than_other(e2e_out):
    same_a, same_g = log_request_totals(e2e_out / "same" / "server.log")
    other_a, other_g = log_request_totals(e2e_out / "other" / "server.log")
    assert same_a / same_g >= 0.9
    assert other_a / other_g <= 0.5 * same_a / same_g


@pytest.mark.parametrize("run", ["same", "other"])
def test_report_on_all_channels_of_one_run_agrees_and_has_a_verdict(e2e_out, run, tmp_path):
    channels_agree(e2e_out / run, run, tmp_path, e2e_out / "plain", decides=False)
