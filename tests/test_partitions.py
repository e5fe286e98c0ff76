"""Every listing that names a request carries the partition values that tell requests of
one id apart (docs/metrics.md, request_partitions): request ids may restart in each
partition folder. The anomalies' own test is in test_anomalies.py."""

from __future__ import annotations

from click.testing import CliRunner

from analyzer.cli import main
from test_anomalies import partitioned_traces
from tracebuilder import deployment, request, round_row, write_table, write_traces


def test_request_partitions_label_every_request(tmp_path):
    traces = partitioned_traces(tmp_path)
    result = CliRunner().invoke(main, ["sql", str(traces), "select q.request_id, p.partition from requests as q "
                                       "join request_partitions as p using (request_uid) order by all",
                                       "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.output == ("request_id,partition\ngood,\"pool=blue, region=eu\"\n"
                             "r1,\"pool=blue, region=eu\"\nr1,\"pool=blue, region=us\"\n")


def test_request_partitions_is_empty_without_partitions(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1")],
                 rounds=[round_row("a", "r1", 0, 4, 3)])
    result = CliRunner().invoke(main, ["sql", str(tmp_path), "select count(*) as n from request_partitions",
                                       "--format", "csv"])
    assert (result.exit_code, result.output) == (0, "n\n0\n")


def test_validate_examples_name_the_partition_of_each_rejected_row(tmp_path):
    # the same round key in two date folders, each accepting 3 of 2 drafts: two rejected rows
    # that only their dates tell apart
    write_traces(tmp_path, deployments=[deployment("a")])
    write_table(tmp_path, "requests", {"date=2026-11-27": [request("a", "r1")],
                                       "date=2026-11-28": [request("a", "r1")]})
    write_table(tmp_path, "rounds", {"date=2026-11-27": [round_row("a", "r1", 0, 2, 3)],
                                     "date=2026-11-28": [round_row("a", "r1", 0, 2, 3)]})
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-3:] == [
        "  rounds       accepted_exceeds_drafted            2",
        "      e.g. deployment_id=a, request_id=r1, round_idx=0, date=2026-11-27",
        "      e.g. deployment_id=a, request_id=r1, round_idx=0, date=2026-11-28"]


def test_the_per_request_views_carry_the_partition(tmp_path):
    traces = partitioned_traces(tmp_path)
    for view, column in (("request_acceptance", "accept_length"), ("request_latency", "ttft_ms")):
        result = CliRunner().invoke(main, ["sql", str(traces), f"select request_id, partition, {column} from {view} "
                                           "order by all", "--format", "csv"])
        assert result.exit_code == 0, result.output
        # r1 accepts nothing over 16 rounds (1 + 0/16), good everything (1 + 16/16); every
        # request arrives at 0 ms and has its first token at 10 ms
        value = {"request_acceptance": {"good": "2.0", "r1": "1.0"}, "request_latency": {"good": "10.0", "r1": "10.0"}}
        assert result.output.splitlines() == [
            f"request_id,partition,{column}",
            f'good,"pool=blue, region=eu",{value[view]["good"]}',
            f'r1,"pool=blue, region=eu",{value[view]["r1"]}',
            f'r1,"pool=blue, region=us",{value[view]["r1"]}']
